package memckpt

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// A frame is what every connection of the store carries, both ways, from a
// trainer or from a peer sidecar:
//
//	magic   [4]byte "EMC1"
//	op      uint8
//	        [3]byte zero
//	metaLen uint32, at most MaxMeta
//	bodyLen uint64
//	meta    metaLen bytes of JSON
//	body    bodyLen bytes: a payload, read straight into its buffer
const (
	frameMagic = "EMC1"
	headerSize = 20
	// MaxMeta bounds a frame's JSON part.
	MaxMeta = 64 << 10
)

// Op says what a frame asks or answers.
type Op uint8

// The operations.
const (
	// OpSave (trainer): store the body; SaveRequest in meta. The store
	// answers OpReady (send the body) or OpReply with the refusal, then
	// OpReply once it is stored.
	OpSave Op = 1 + iota
	// OpLoad (trainer): the newest copy the job has; OpReply with Meta
	// and the payload, or Found false.
	OpLoad
	// OpHello (peer): the client's proof; answered with the server's.
	OpHello
	// OpPush (peer): keep the body as a replica; Meta in meta.
	OpPush
	// OpHead (peer): the Meta of the newest copy held, no body.
	OpHead
	// OpGet (peer): the newest copy held, with its body.
	OpGet
	// OpReady: send the body now.
	OpReady
	// OpReply answers a request; Reply in meta.
	OpReply
	// OpPing (trainer): would a save of the generation in meta
	// (SaveRequest) be taken now? OpReply at once: empty, or the fence's
	// refusal. A trainer whose save the store did not answer in time
	// asks, without waiting, to learn when it answers again.
	OpPing
	opEnd
)

// ErrInvalidFrame is returned for a frame that cannot be read.
var ErrInvalidFrame = errors.New("memckpt: invalid frame")

// Header is a frame's fixed part.
type Header struct {
	Op      Op
	MetaLen uint32
	BodyLen uint64
}

// Encode writes h in its wire form.
func (h Header) Encode() [headerSize]byte {
	var b [headerSize]byte
	copy(b[:4], frameMagic)
	b[4] = byte(h.Op)
	binary.LittleEndian.PutUint32(b[8:12], h.MetaLen)
	binary.LittleEndian.PutUint64(b[12:20], h.BodyLen)
	return b
}

// DecodeHeader reads a frame's fixed part; a body longer than maxBody is
// refused here, before anything is allocated for it.
func DecodeHeader(b []byte, maxBody uint64) (Header, error) {
	if len(b) != headerSize {
		return Header{}, fmt.Errorf("%w: header of %d bytes", ErrInvalidFrame, len(b))
	}
	if string(b[:4]) != frameMagic {
		return Header{}, fmt.Errorf("%w: bad magic %q", ErrInvalidFrame, b[:4])
	}
	if b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return Header{}, fmt.Errorf("%w: reserved bytes set", ErrInvalidFrame)
	}
	h := Header{Op: Op(b[4]), MetaLen: binary.LittleEndian.Uint32(b[8:12]), BodyLen: binary.LittleEndian.Uint64(b[12:20])}
	switch {
	case h.Op == 0 || h.Op >= opEnd:
		return Header{}, fmt.Errorf("%w: unknown op %d", ErrInvalidFrame, h.Op)
	case h.MetaLen > MaxMeta:
		return Header{}, fmt.Errorf("%w: meta of %d bytes, more than %d", ErrInvalidFrame, h.MetaLen, MaxMeta)
	case h.BodyLen > maxBody:
		return Header{}, fmt.Errorf("%w: body of %d bytes, more than %d", ErrInvalidFrame, h.BodyLen, maxBody)
	}
	return h, nil
}

// readFrame reads a frame's header and meta into meta (a pointer), leaving
// the body, if any, unread.
func readFrame(r io.Reader, maxBody uint64, meta any) (Header, error) {
	var b [headerSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return Header{}, err
	}
	h, err := DecodeHeader(b[:], maxBody)
	if err != nil {
		return Header{}, err
	}
	m := make([]byte, h.MetaLen)
	if _, err := io.ReadFull(r, m); err != nil {
		return Header{}, err
	}
	if err := decodeMeta(m, meta); err != nil {
		return Header{}, err
	}
	return h, nil
}

func decodeMeta(m []byte, meta any) error {
	if len(m) == 0 {
		return nil
	}
	if err := json.Unmarshal(m, meta); err != nil {
		return fmt.Errorf("%w: meta: %v", ErrInvalidFrame, err)
	}
	return nil
}

// writeFrame writes a frame whose body is body (a payload written as it is,
// never copied).
func writeFrame(w io.Writer, op Op, meta any, body []byte) error {
	var m []byte
	if meta != nil {
		var err error
		if m, err = json.Marshal(meta); err != nil {
			return err
		}
	}
	h := Header{Op: op, MetaLen: uint32(len(m)), BodyLen: uint64(len(body))}.Encode()
	if _, err := w.Write(append(h[:], m...)); err != nil {
		return err
	}
	if len(body) > 0 {
		_, err := w.Write(body)
		return err
	}
	return nil
}

// SaveRequest is a trainer's OpSave, or its OpPing (Generation alone).
type SaveRequest struct {
	// Generation is the trainer's ELASTIC_GENERATION: what the fence checks.
	Generation int64 `json:"generation"`
	// Seq orders the trainer's saves, 1 for its first.
	Seq  int64 `json:"seq"`
	Rank int   `json:"rank"`
	// Path, if set, is where the copy is written on disk, absolute.
	Path string `json:"path,omitempty"`
}

// Reply answers a request.
type Reply struct {
	// Error is why the request failed; Kind says what failed: "fenced",
	// "too_large" or "error".
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
	// Found, with Meta, describes the copy whose payload is the body.
	Found bool  `json:"found,omitempty"`
	Meta  *Meta `json:"meta,omitempty"`
	// Proof is a peer's answer to OpHello.
	Proof string `json:"proof,omitempty"`
}

// Hello is a peer's OpHello.
type Hello struct {
	Job   string `json:"job"`
	Proof string `json:"proof"`
}
