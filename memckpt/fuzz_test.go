package memckpt

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func FuzzDecodeHeader(f *testing.F) {
	for _, h := range []Header{{Op: OpSave, MetaLen: 40, BodyLen: 4 << 20}, {Op: OpReply}, {Op: OpPush, MetaLen: MaxMeta, BodyLen: 1}} {
		b := h.Encode()
		f.Add(b[:])
	}
	f.Add([]byte("EMC1\x09\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHeader(data, 1<<30)
		if err != nil {
			return
		}
		again := h.Encode()
		require.Equal(t, data, again[:], "a header decoded is encoded back the same")
	})
}

func FuzzDecodeFileHeader(f *testing.F) {
	good, err := EncodeFileHeader(Meta{Job: "j", Generation: 3, Seq: 7, Rank: 1, Node: "n-1", Path: "/p", Size: 5, CRC32: 9})
	require.NoError(f, err)
	f.Add(good)
	f.Add(append(append([]byte{}, good...), "payload"...))
	f.Add([]byte("ELCKPT01\xff\xff\xff\xff{}"))
	f.Add([]byte("ELCKPT01\x02\x00\x00\x00{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, n, err := DecodeFileHeader(data)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidFile)
			return
		}
		require.NoError(t, m.Validate())
		enc, err := EncodeFileHeader(m)
		require.NoError(t, err)
		again, _, err := DecodeFileHeader(enc)
		require.NoError(t, err)
		require.Equal(t, m, again)
		require.LessOrEqual(t, n, len(data))
	})
}

func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	require.NoError(f, writeFrame(&buf, OpSave, SaveRequest{Generation: 2, Seq: 1, Path: "/x"}, []byte("body")))
	f.Add(buf.Bytes())
	buf.Reset()
	require.NoError(f, writeFrame(&buf, OpReply, Reply{Found: true, Meta: &Meta{Job: "j", Size: 3}}, []byte("abc")))
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Reply
		_, _ = readFrame(bytes.NewReader(data), 1<<20, &r)
		var s SaveRequest
		_, _ = readFrame(bytes.NewReader(data), 1<<20, &s)
	})
}
