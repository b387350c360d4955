package handover

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/elastictraining/coordinator/guard"
)

// ErrHeld is returned by Open when another process holds the node's state:
// a sidecar of the same job and node that still runs.
var ErrHeld = errors.New("handover: another sidecar of this node is running")

// DefaultDir is where the state files go without --state-dir:
// $XDG_RUNTIME_DIR/elastic-sidecar where that is set (a tmpfs of the user's,
// emptied at logout and boot), else elastic-sidecar-UID in the temporary
// directory.
func DefaultDir(getenv func(string) string) string {
	if dir := getenv("XDG_RUNTIME_DIR"); dir != "" && filepath.IsAbs(dir) {
		return filepath.Join(dir, "elastic-sidecar")
	}
	return filepath.Join(os.TempDir(), "elastic-sidecar-"+strconv.Itoa(os.Getuid()))
}

// Store is a node's state file and the lock its sidecar holds on it while
// it runs.
type Store struct {
	path string
	lock *os.File
}

// Name is the stem of the state file of job's node in the etcd cluster
// and key prefix given: sidecars of other clusters on the machine (two
// `coordinator run`s, tests) are other nodes, whatever their names.
func Name(cluster uint64, prefix, job, node string) string {
	h := fnv.New32a()
	_, _ = fmt.Fprintf(h, "%x\x00%s", cluster, prefix)
	return fmt.Sprintf("%s_%s_%08x", job, node, h.Sum32())
}

// Open takes the lock on the state named name in dir, creating dir if
// need be. It returns ErrHeld, naming the holder where it can, while
// another process holds it.
func Open(dir, name string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	base := filepath.Join(dir, name)
	for range 100 {
		lock, err := lockFile(base + ".lock")
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "a process"
			if data, err := os.ReadFile(base + ".json"); err == nil {
				if st, err := Decode(data); err == nil {
					holder = "pid " + strconv.Itoa(st.Pid)
				}
			}
			return nil, fmt.Errorf("%w: %s holds %s", ErrHeld, holder, base+".lock")
		}
		if err != nil {
			return nil, fmt.Errorf("state lock: %w", err)
		}
		if lock != nil {
			return &Store{path: base + ".json", lock: lock}, nil
		}
	}
	return nil, fmt.Errorf("state lock %s: removed as fast as it is taken", base+".lock")
}

// lockFile opens and locks path. It returns a nil file (and no error) when
// path was removed or replaced meanwhile, by a holder that ended: the lock
// taken is then on a file no one else will look at, and must be taken
// again on the one at path.
func lockFile(path string) (*os.File, error) {
	// O_CLOEXEC: the guard and the training processes must not hold it,
	// or a live trainer would look like a live sidecar.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	held, err1 := f.Stat()
	named, err2 := os.Stat(path)
	if err1 != nil || err2 != nil || !os.SameFile(held, named) {
		f.Close()
		return nil, nil
	}
	return f, nil
}

// Path is the state file's path.
func (s *Store) Path() string { return s.path }

// Previous reads the state the node's last sidecar left. ok is false when
// there is none; an error says why the file cannot be used.
func (s *Store) Previous() (st State, ok bool, err error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, err
	}
	st, err = Decode(data)
	if err != nil {
		return State{}, false, err
	}
	return st, true, nil
}

// Write replaces the state file atomically (a temporary file renamed over
// it). When that fails it removes the file, so that no successor acts on
// an out-of-date one; it returns an error only when the file it leaves
// may be out of date.
func (s *Store) Write(st State) error {
	data, err := Encode(st)
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	err = os.WriteFile(tmp, data, 0o600)
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err == nil {
		return nil
	}
	_ = os.Remove(tmp)
	if rmErr := os.Remove(s.path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		return fmt.Errorf("write state file: %w; and an out-of-date one is left: %v", err, rmErr)
	}
	return nil
}

// Remove deletes the state file and its lock, which it still holds: the
// sidecar ended, and left nothing running under a lease it holds.
func (s *Store) Remove() {
	_ = os.Remove(s.path)
	if s.lock != nil {
		_ = os.Remove(s.lock.Name())
	}
}

// Close releases the lock. The file stays for the next sidecar.
func (s *Store) Close() {
	if s.lock != nil {
		_ = s.lock.Close()
		s.lock = nil
	}
}

// Self is the calling process as a State names it: boot id, pid namespace,
// pid and start time.
func Self() (State, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return State{}, fmt.Errorf("boot id: %w", err)
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return State{}, fmt.Errorf("pid namespace: %w", err)
	}
	pid := os.Getpid()
	p, ok := guard.ReadProc(pid)
	if !ok {
		return State{}, errors.New("read /proc/self/stat")
	}
	return State{Boot: strings.TrimSpace(string(boot)), PidNS: ns, Pid: pid, Start: p.Start}, nil
}
