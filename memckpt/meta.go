package memckpt

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/elastictraining/coordinator/membership"
)

// Meta describes one copy of a job's state.
type Meta struct {
	Job string `json:"job"`
	// Incarnation is the life of the job the copy was made in (see
	// Incarnation); empty for a standalone trainer's, or an older build's.
	Incarnation string `json:"incarnation,omitempty"`
	// Generation and Seq order the copies of one life of the job: a later
	// generation's first save is newer than anything of an earlier one.
	Generation int64 `json:"generation"`
	Seq        int64 `json:"seq"`
	// Rank and Node are the saver's.
	Rank int    `json:"rank"`
	Node string `json:"node,omitempty"`
	// Path, if set, is where the saver asked the copy to be written.
	Path string `json:"path,omitempty"`
	// Size is the payload's length and CRC32 its IEEE CRC-32 (what
	// Python's zlib.crc32 computes).
	Size  int64  `json:"size"`
	CRC32 uint32 `json:"crc32"`
}

// Validate reports the first field of m out of range. A standalone
// trainer's file has no job and generation 0.
func (m Meta) Validate() error {
	if m.Job != "" {
		if err := membership.ValidateJobID(m.Job); err != nil {
			return err
		}
	}
	if m.Node != "" {
		if err := membership.ValidateNodeID(m.Node); err != nil {
			return err
		}
	}
	if len(m.Incarnation) > 64 || strings.Trim(m.Incarnation, "0123456789abcdef") != "" {
		return fmt.Errorf("incarnation %q: want at most 64 lowercase hex digits", m.Incarnation)
	}
	if m.Generation < 0 || m.Seq < 0 || m.Rank < 0 || m.Size < 0 {
		return fmt.Errorf("negative generation, sequence, rank or size")
	}
	return nil
}

// Newer says whether m is a newer copy than o: a higher generation, then a
// higher sequence; equal ones are told apart by the lower rank, then the
// node, so that every node picks the same one.
func (m Meta) Newer(o Meta) bool {
	if m.Generation != o.Generation {
		return m.Generation > o.Generation
	}
	if m.Seq != o.Seq {
		return m.Seq > o.Seq
	}
	if m.Rank != o.Rank {
		return m.Rank < o.Rank
	}
	return m.Node < o.Node
}

// Incarnation names a life of a job, from its secret: a job deleted and
// created again under its name, or `coordinator run` started again, has a
// new secret, and its generations count from 1 again. Generations order
// copies only within one life, so a file left by an earlier life (its
// generation 9, say) must not pass for newer than this life's generation
// 2. The name is a hash of the secret: it says nothing of it.
func Incarnation(secret []byte) string {
	sum := sha256.Sum256(append([]byte("elastic job incarnation\x00"), secret...))
	return hex.EncodeToString(sum[:8])
}

// SupersededBy says whether the file copy f is at least as new as m, for
// a sidecar about to write m over it: a copy of m's job and life that is
// not older. A file of another life of the job is older than any copy of
// this one, however high its generation: this life began from it, or
// from nothing.
func (m Meta) SupersededBy(f Meta) bool {
	return f.Job == m.Job && f.Incarnation == m.Incarnation && !m.Newer(f)
}

// same says whether m and o are the same copy.
func (m Meta) same(o Meta) bool {
	return m.Job == o.Job && m.Incarnation == o.Incarnation && m.Generation == o.Generation && m.Seq == o.Seq && m.Rank == o.Rank && m.Node == o.Node
}

// Copy is a complete copy: its payload matches its Meta. Its Body is never
// written after the copy is made, so it is shared, not copied, by every
// reader.
type Copy struct {
	Meta
	Body []byte
}

// checksum is the payload's CRC-32 (IEEE, hardware-assisted).
func checksum(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

// verify checks that body is the payload m describes.
func (m Meta) verify(body []byte) error {
	if int64(len(body)) != m.Size {
		return fmt.Errorf("payload of %d bytes, %d announced", len(body), m.Size)
	}
	if sum := checksum(body); sum != m.CRC32 {
		return fmt.Errorf("payload checksum %08x, %08x announced", sum, m.CRC32)
	}
	return nil
}
