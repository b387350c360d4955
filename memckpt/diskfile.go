package memckpt

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The file a copy is written to on disk:
//
//	magic   [8]byte "ELCKPT01"
//	metaLen uint32 little-endian, at most MaxMeta
//	meta    metaLen bytes of JSON: Meta
//	payload Meta.Size bytes
//
// elastic.py reads and writes the same format.
const fileMagic = "ELCKPT01"

// ErrInvalidFile is returned for a file that is not a complete copy.
var ErrInvalidFile = errors.New("memckpt: invalid checkpoint file")

// errNewerOnDisk is a copy not written because the file at its path holds
// one of the job at least as new: the trainer wrote it itself while this
// sidecar did not answer (elastic.py), or another sidecar wrote a later
// generation's.
var errNewerOnDisk = errors.New("memckpt: the file on disk is as new or newer")

// EncodeFileHeader is the part of the file before the payload.
func EncodeFileHeader(m Meta) ([]byte, error) {
	js, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 12, 12+len(js))
	copy(b, fileMagic)
	binary.LittleEndian.PutUint32(b[8:12], uint32(len(js)))
	return append(b, js...), nil
}

// DecodeFileHeader reads the part of a file before the payload from its
// first bytes; n is that part's length.
func DecodeFileHeader(b []byte) (m Meta, n int, err error) {
	if len(b) < 12 || string(b[:8]) != fileMagic {
		return Meta{}, 0, fmt.Errorf("%w: no header", ErrInvalidFile)
	}
	l := binary.LittleEndian.Uint32(b[8:12])
	if l > MaxMeta || uint64(len(b)) < 12+uint64(l) {
		return Meta{}, 0, fmt.Errorf("%w: header of %d bytes", ErrInvalidFile, l)
	}
	if err := json.Unmarshal(b[12:12+l], &m); err != nil {
		return Meta{}, 0, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	if err := m.Validate(); err != nil {
		return Meta{}, 0, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	return m, 12 + int(l), nil
}

// readFileMeta reads the header of the file at path, not its payload.
func readFileMeta(path string) (Meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return Meta{}, err
	}
	defer f.Close()
	return readHeader(bufio.NewReader(f))
}

// newerOnDisk says whether the file at path holds a copy of m's job, of
// its life, at least as new as m. A file that cannot be read holds none.
func newerOnDisk(path string, m Meta) bool {
	d, err := readFileMeta(path)
	return err == nil && m.SupersededBy(d)
}

// ReadFile reads and checks the copy at path.
func ReadFile(path string) (Copy, error) {
	f, err := os.Open(path)
	if err != nil {
		return Copy{}, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	m, err := readHeader(r)
	if err != nil {
		return Copy{}, err
	}
	body := make([]byte, m.Size)
	if _, err := io.ReadFull(r, body); err != nil {
		return Copy{}, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	if err := m.verify(body); err != nil {
		return Copy{}, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	return Copy{Meta: m, Body: body}, nil
}

// readHeader reads the part of a file before the payload.
func readHeader(r *bufio.Reader) (Meta, error) {
	head, err := r.Peek(12)
	if err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	l := binary.LittleEndian.Uint32(head[8:12])
	if l > MaxMeta {
		return Meta{}, fmt.Errorf("%w: header of %d bytes", ErrInvalidFile, l)
	}
	hb := make([]byte, 12+int(l))
	if _, err := io.ReadFull(r, hb); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	m, _, err := DecodeFileHeader(hb)
	return m, err
}

// writeFile writes c to path atomically: to a file beside it, synced, then
// renamed over it once commit says the node may still write (the fence).
// It never writes over a file of the job as new as c or newer
// (errNewerOnDisk): it looks before it writes and again right before the
// rename.
func writeFile(path string, c Copy, commit func() error) error {
	if newerOnDisk(path, c.Meta) {
		return errNewerOnDisk
	}
	head, err := EncodeFileHeader(c.Meta)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // gone once renamed; a leftover otherwise
	_, err = f.Write(head)
	if err == nil {
		_, err = f.Write(c.Body)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := commit(); err != nil {
		return err
	}
	if newerOnDisk(path, c.Meta) {
		return errNewerOnDisk
	}
	return os.Rename(tmp, path)
}
