package memckpt

import (
	"bufio"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/pythons"
	"golang.org/x/sys/unix"
)

// The progress page's words (byte offsets), as the guard lays it out.
const (
	pageSize        = 4096
	offSteps        = 16
	offLastStep     = 24
	offLastActivity = 32
	offUserStep     = 40
	offQuietUntil   = 48
	offDump         = 56
	offAttached     = 64
)

var pageMagic = []byte("ELPROG1\x00")

// newPage is a progress page as the guard makes one: a 4096-byte memfd
// that starts with the magic.
func newPage(t testing.TB) *os.File {
	t.Helper()
	return newMemfd(t, append(append([]byte{}, pageMagic...), make([]byte, pageSize-len(pageMagic))...))
}

func newMemfd(t testing.TB, content []byte) *os.File {
	t.Helper()
	fd, err := unix.MemfdCreate("elastic-progress", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), "progress")
	t.Cleanup(func() { f.Close() })
	_, err = f.Write(content)
	require.NoError(t, err)
	return f
}

// word reads the page's word at off.
func word(t testing.TB, page *os.File, off int64) uint64 {
	t.Helper()
	var b [8]byte
	_, err := page.ReadAt(b[:], off)
	require.NoError(t, err)
	return binary.LittleEndian.Uint64(b[:])
}

// requireTorch fails the test when /usr/bin/python3 cannot import torch
// (Debian's python3-torch).
func requireTorch(t *testing.T) {
	t.Helper()
	requirePython(t)
	if out, err := exec.Command(python, "-c", "import torch").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import torch (apt-get install python3-torch): %v\n%s", python, err, out)
	}
}

// interpreters are the Python interpreters the standard-library parts are
// tried with: Debian's, the venv's (make venv: torch 2.15), and the first
// python3 on PATH when it is another.
func interpreters(t *testing.T) []string {
	t.Helper()
	requirePython(t)
	pys := []string{python, pythons.Venv(t)}
	if p, err := exec.LookPath("python3"); err == nil {
		// A pyenv shim is a script: the interpreter it runs.
		out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
		if exe := strings.TrimSpace(string(out)); err == nil && exe != "" && exe != python {
			pys = append(pys, exe)
		}
	}
	return pys
}

// dumpSignal is the signal py registers for its stacks: SIGRTMIN+6.
func dumpSignal(t *testing.T, py string) uint64 {
	t.Helper()
	out, err := exec.Command(py, "-c", "import signal; print(int(signal.SIGRTMIN) + 6)").Output()
	require.NoError(t, err)
	n, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 32)
	require.NoError(t, err)
	return n
}

// moduleDir is a directory where WriteModule wrote the trainers' modules.
func moduleDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, WriteModule(dir))
	return dir
}

// pyEnv is this process's environment without what would change a
// trainer's, with PYTHONPATH and extra.
func pyEnv(pythonPath string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PYTHON") || strings.HasPrefix(kv, "ELASTIC_") {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "PYTHONPATH="+pythonPath), extra...)
}

// pyProc is a Python process under test; its output lines arrive on out
// and errs.
type pyProc struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     chan string
	errs    chan string
	readers sync.WaitGroup
	lines   []string // read so far, for messages
	waited  bool
}

// startPy starts py with args, env and files as descriptors 3, 4, ...
func startPy(t *testing.T, py string, env []string, files []*os.File, args ...string) *pyProc {
	t.Helper()
	cmd := exec.Command(py, args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	cmd.ExtraFiles = files
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &pyProc{t: t, cmd: cmd, stdin: stdin, out: make(chan string, 4096), errs: make(chan string, 4096)}
	p.readers.Add(2)
	go p.read(stdout, p.out)
	go p.read(stderr, p.errs)
	t.Cleanup(func() {
		if !p.waited {
			_ = cmd.Process.Kill()
			p.wait()
		}
	})
	return p
}

func (p *pyProc) read(r io.Reader, lines chan<- string) {
	defer p.readers.Done()
	defer close(lines)
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		lines <- s.Text()
	}
}

// expect reads lines from ch (p.out or p.errs) until one contains want,
// and returns it. The deadline only ends a test that went wrong.
func (p *pyProc) expect(ch <-chan string, want string) string {
	p.t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case line, ok := <-ch:
			if !ok {
				p.t.Fatalf("no line with %q; output:\n%s", want, p.output())
			}
			p.lines = append(p.lines, line)
			if strings.Contains(line, want) {
				return line
			}
		case <-deadline:
			p.t.Fatalf("no line with %q after 2 minutes; output:\n%s", want, p.output())
		}
	}
}

// reply writes a line to the process's stdin.
func (p *pyProc) reply() {
	p.t.Helper()
	_, err := io.WriteString(p.stdin, "\n")
	require.NoError(p.t, err)
}

// wait waits for the process's exit after the rest of its output; it
// returns that exit's error.
func (p *pyProc) wait() error {
	p.waited = true
	p.stdin.Close()
	for p.out != nil || p.errs != nil {
		select {
		case line, ok := <-p.out:
			if !ok {
				p.out = nil
				continue
			}
			p.lines = append(p.lines, line)
		case line, ok := <-p.errs:
			if !ok {
				p.errs = nil
				continue
			}
			p.lines = append(p.lines, line)
		}
	}
	p.readers.Wait()
	return p.cmd.Wait()
}

// succeed waits for the process's exit, which must be a success.
func (p *pyProc) succeed() {
	p.t.Helper()
	err := p.wait()
	require.NoError(p.t, err, "output:\n%s", p.output())
}

func (p *pyProc) output() string { return strings.Join(p.lines, "\n") }

// writeScript writes a script into a new directory; it returns its path.
func writeScript(t *testing.T, name, src string) string {
	t.Helper()
	path := t.TempDir() + "/" + name
	require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	return path
}
