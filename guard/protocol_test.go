package guard_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
)

// fuzzDecoder checks that a decoder never panics, fails only with
// ErrInvalidMessage, and reads back what it accepted.
func fuzzDecoder[T any](f *testing.F, decode func([]byte) (T, error), seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decode(data)
		if err != nil {
			require.ErrorIs(t, err, guard.ErrInvalidMessage)
			return
		}
		b, err := json.Marshal(v)
		require.NoError(t, err)
		again, err := decode(b)
		require.NoError(t, err, "re-decoding %s", b)
		require.Equal(t, v, again)
	})
}

func FuzzDecodeCommand(f *testing.F) {
	fuzzDecoder(f, guard.DecodeCommand,
		`{"seq":1,"op":"deadline","lease":7,"killAt":123456789}`,
		`{"seq":2,"op":"start","lease":7,"generation":3,"procs":[{"rank":0,"path":"/bin/true","argv":["true"],"env":["A=B"],"prefix":"[rank 0] "}]}`,
		`{"seq":3,"op":"stop","graceNanos":1000000000}`, `{"seq":4,"op":"kill"}`)
}

func FuzzDecodeReport(f *testing.F) {
	fuzzDecoder(f, guard.DecodeReport,
		`{"event":"ready","seq":0,"pid":12,"cgroup":"/sys/fs/cgroup/x"}`, `{"event":"started","seq":2,"pids":[13,14]}`,
		`{"event":"exit","seq":2,"pid":13,"rank":1,"code":137,"signal":9}`, `{"event":"fenced","seq":5,"lease":7}`)
}

func FuzzDecodeCommitRequest(f *testing.F) {
	fuzzDecoder(f, guard.DecodeCommitRequest,
		`{"op":"rename","generation":3,"src":"/ckpt/a.tmp","dst":"/ckpt/a"}`, `{"op":"check","generation":1}`)
}
