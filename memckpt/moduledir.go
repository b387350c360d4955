package memckpt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ModuleDirPrefix names the temporary directories sidecars write the
// trainers' modules in.
const ModuleDirPrefix = "elastic-python-"

// ownerFile is the file of a module directory that its sidecar holds a
// lock on (flock) for as long as it lives. The lock goes with the process,
// however it ends (SIGKILL included), and belongs to no pid: an owner in
// another pid namespace, or a pid reused since, cannot be taken for
// another.
const ownerFile = "owner.lock"

// unownedDirAge is how old a module directory with no owner file must be
// before it counts as left behind: its sidecar creates the directory a
// moment before the file, and one killed in between leaves it empty.
const unownedDirAge = time.Hour

// ModuleDir is a temporary directory of the trainers' modules that this
// process owns: removed by Close, or by the next sidecar or run on the
// machine once this process is gone.
type ModuleDir struct {
	path string
	lock *os.File
}

// NewModuleDir creates a module directory in tmp (os.TempDir() if empty),
// owned by this process, and writes the modules into it.
func NewModuleDir(tmp string) (*ModuleDir, error) {
	dir, err := os.MkdirTemp(tmp, ModuleDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("module directory: %w", err)
	}
	d := &ModuleDir{path: dir}
	if d.lock, err = takeOwnership(dir); err == nil {
		err = WriteModule(dir)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("module directory: %w", err)
	}
	return d, nil
}

// takeOwnership puts the owner file into dir already locked: the file is
// locked under a temporary name and renamed into place, so that a sweep
// never sees it unlocked while its owner lives. The descriptor is
// close-on-exec (as every file Go opens): no child holds the lock, or a
// live trainer would look like a live sidecar.
func takeOwnership(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "."+ownerFile+"-*")
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, ownerFile)); err != nil {
		f.Close()
		_ = os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// Path is the directory, for the trainers' PYTHONPATH.
func (d *ModuleDir) Path() string { return d.path }

// Close removes the directory, then lets go of it. Safe to call twice.
func (d *ModuleDir) Close() {
	if d.path != "" {
		_ = os.RemoveAll(d.path)
		d.path = ""
	}
	if d.lock != nil {
		d.lock.Close()
		d.lock = nil
	}
}

// SweepModuleDirs removes the module directories in tmp whose sidecars
// were killed (SIGKILL, a crash) before they could remove them, and
// returns how many it removed. A directory is left behind when no process
// holds the lock on its owner file. Only this user's directories are
// looked at. A directory with the modules but no owner file was written by
// an older build, which gave nothing to tell whether it still runs: it is
// left as it is.
func SweepModuleDirs(tmp string) int {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), ModuleDirPrefix) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
			continue
		}
		if removeIfLeft(filepath.Join(tmp, e.Name()), info.ModTime()) {
			n++
		}
	}
	return n
}

// removeIfLeft removes dir if no process owns it, and reports whether it
// did. The lock on the owner file is held while dir is removed.
func removeIfLeft(dir string, modified time.Time) bool {
	f, err := os.Open(filepath.Join(dir, ownerFile))
	if errors.Is(err, os.ErrNotExist) {
		if time.Since(modified) <= unownedDirAge || !unowned(dir) {
			return false
		}
		return os.RemoveAll(dir) == nil
	}
	if err != nil {
		return false // nothing is removed on a guess
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false // its owner lives, or the lock cannot be asked
	}
	return os.RemoveAll(dir) == nil
}

// unowned reports whether dir, which has no owner file, holds none of the
// modules either: its sidecar was killed before it locked it. One with
// the modules is an older build's (which wrote elastic.py and the modules
// beside it, not the package).
func unowned(dir string) bool {
	for _, name := range append(moduleFiles(), "elastic", "elastic.py", "_elastic_progress.py", "_elastic_inplace.py") {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return true
}
