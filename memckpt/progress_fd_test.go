package memckpt

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fdScript says whether the process took a page, and whether descriptor 3
// is still open.
const fdScript = `import os, sitecustomize
_elastic_progress = sitecustomize.progress_module()
print("variable:", os.environ.get("ELASTIC_PROGRESS_FD"))
print("attached:", _elastic_progress.attached())
try:
    os.fstat(3)
    print("descriptor 3 open")
except OSError:
    print("descriptor 3 closed")
`

// TestProgressLeavesOtherDescriptorsAlone: a descriptor that is not a
// 4096-byte memfd starting with the magic is neither written, mapped for
// good, nor closed; the variable goes all the same.
func TestProgressLeavesOtherDescriptorsAlone(t *testing.T) {
	dir := moduleDir(t)
	script := writeScript(t, "fd.py", fdScript)
	rng := rand.New(rand.NewSource(32))
	random := func(n int) []byte {
		b := make([]byte, n)
		rng.Read(b)
		return b
	}
	magic := func(n int) []byte { return append(append([]byte{}, pageMagic...), random(n-len(pageMagic))...) }
	regular := func(t testing.TB, content []byte) *os.File {
		path := filepath.Join(t.TempDir(), "user-file")
		require.NoError(t, os.WriteFile(path, content, 0o644))
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	type fdCase struct {
		name     string
		variable string
		content  []byte // descriptor 3's
		file     func(t testing.TB, content []byte) *os.File
	}
	cases := []fdCase{
		{"a regular file", "3", random(pageSize), regular},
		{"a regular file with the magic", "3", magic(pageSize), regular},
		{"a memfd, a byte of the magic wrong", "3", append([]byte("ELPROG1\x01"), make([]byte, pageSize-8)...), newMemfd},
		{"a memfd with the magic, too large", "3", magic(2 * pageSize), newMemfd},
		{"a memfd with the magic, too small", "3", magic(pageSize - 1), newMemfd},
		{"an empty memfd", "3", nil, newMemfd},
		{"a page opened read-only", "3", magic(pageSize), func(t testing.TB, content []byte) *os.File {
			f, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", newMemfd(t, content).Fd()))
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			return f
		}},
		{"a pipe", "3", nil, func(t testing.TB, _ []byte) *os.File {
			r, w, err := os.Pipe()
			require.NoError(t, err)
			t.Cleanup(func() { r.Close(); w.Close() })
			return r
		}},
		{"the variable names stdout", "1", nil, nil},
		{"the variable names a closed descriptor", "99", nil, nil},
		{"the variable is not a number", "three", nil, nil},
		{"the variable is negative", "-3", nil, nil},
		{"the variable is empty", "", nil, nil},
	}
	// And random ones: regular files and memfds of any size, with the
	// magic or not, but never the page itself.
	for i := range 16 {
		size := rng.Intn(2 * pageSize)
		if i%4 == 0 {
			size = pageSize
		}
		content := random(size)
		if i%2 == 0 && size >= len(pageMagic) {
			copy(content, pageMagic)
		}
		c := fdCase{fmt.Sprintf("random %d: a regular file of %d bytes", i, size), "3", content, regular}
		if i%3 != 0 && !(size == pageSize && bytes.HasPrefix(content, pageMagic)) {
			c.name, c.file = fmt.Sprintf("random %d: a memfd of %d bytes", i, size), newMemfd
		}
		cases = append(cases, c)
	}
	for _, py := range interpreters(t) {
		for _, tc := range cases {
			t.Run(py+"/"+tc.name, func(t *testing.T) {
				var files []*os.File
				if tc.file != nil {
					files = append(files, tc.file(t, tc.content))
				}
				p := startPy(t, py, pyEnv(dir, "ELASTIC_PROGRESS_FD="+tc.variable), files, script)
				p.succeed()
				out := p.output()
				assert.Contains(t, out, "variable: None", "the variable is gone")
				assert.Contains(t, out, "attached: False")
				if tc.file == nil {
					return
				}
				assert.Contains(t, out, "descriptor 3 open")
				if tc.content != nil {
					got := make([]byte, len(tc.content)+1)
					n, _ := files[0].ReadAt(got, 0)
					assert.True(t, bytes.Equal(tc.content, got[:n]), "descriptor 3's file is untouched")
				}
			})
		}
	}
}
