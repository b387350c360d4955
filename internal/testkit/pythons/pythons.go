// Package pythons names the Python interpreters the tests run real
// frameworks with: Debian's, with torch 1.13, and the project's virtual
// environment (make venv, bin/venv), with PyPI's torch 2.15, PaddlePaddle,
// MindSpore and torchft. A test of a PyTorch promise runs on both: users
// run either.
package pythons

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Debian is Debian's python3, with python3-torch (torch 1.13).
const Debian = "/usr/bin/python3"

// Interpreter is one Python with torch.
type Interpreter struct {
	// Name says which torch, for subtest names: "torch1.13", "torch2.15".
	Name string
	// Path is the interpreter.
	Path string
}

// Torches are the interpreters a PyTorch test runs on: Debian's torch 1.13
// and the venv's torch 2.15. Either missing fails t under CI (`make test`
// builds the venv) and skips it elsewhere, saying how to get it.
func Torches(t testing.TB) []Interpreter {
	t.Helper()
	return []Interpreter{{Name: "torch1.13", Path: require(t, Debian, "torch", "apt-get install python3-torch")}, {Name: "torch2.15", Path: Venv(t)}}
}

// Venv is the venv's interpreter, with the frameworks of
// hack/python/requirements.txt; its absence fails t under CI and skips it
// elsewhere.
func Venv(t testing.TB) string {
	t.Helper()
	return require(t, VenvPath(), "torch", "make venv")
}

// Paddle is the venv's interpreter once it imports paddle (PaddlePaddle
// 3.3.1, the CPU build).
func Paddle(t testing.TB) string {
	t.Helper()
	return require(t, VenvPath(), "paddle", "make venv")
}

// MindSpore is the venv's interpreter once it imports mindspore.
func MindSpore(t testing.TB) string {
	t.Helper()
	return require(t, VenvPath(), "mindspore", "make venv")
}

// VenvPath is where make venv puts the venv's interpreter, found or not.
func VenvPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "bin", "venv", "bin", "python")
}

// imports caches what require learnt: importing torch 2 takes seconds.
var imports sync.Map // python+" "+module → error (nil: it imports)

// require returns python if it can import module, else fails or skips t.
func require(t testing.TB, python, module, how string) string {
	t.Helper()
	key := python + " " + module
	result, ok := imports.Load(key)
	if !ok {
		var failed error
		if out, err := exec.Command(python, "-c", "import "+module).CombinedOutput(); err != nil {
			failed = fmt.Errorf("%w\n%s", err, out)
		}
		result, _ = imports.LoadOrStore(key, failed)
	}
	err, _ := result.(error)
	if err == nil {
		return python
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s cannot import %s (%s): %v", python, module, how, err)
	}
	t.Skipf("%s cannot import %s (%s): %v", python, module, how, err)
	return ""
}
