package proctest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/elastictraining/coordinator/guard"
)

// Cgroup creates a cgroup v2 of the test's own below the test process's
// and returns it open, for exec.Cmd's SysProcAttr.CgroupFD. A guard sweeps
// the cgroups of dead guards beside its own when it starts, so a test that
// leaves a dead guard's processes running on purpose keeps them in a
// cgroup of its own, out of reach of the guards of tests running beside
// it. The test fails when no cgroup is writable; at its end the cgroup's
// processes are killed and the cgroup removed.
func Cgroup(t testing.TB, name string) *os.File {
	t.Helper()
	own, err := guard.OwnCgroupDir()
	if err != nil {
		t.Fatalf("a cgroup of the test's own: %v", err)
	}
	dir := filepath.Join(own, name+"-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("a cgroup of the test's own: %v", err)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatalf("a cgroup of the test's own: %v", err)
	}
	t.Cleanup(func() {
		_ = f.Close()
		_ = guard.KillCgroup(dir)
		for i := 0; i < 500 && removeTree(dir) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	})
	return f
}

// removeTree removes a cgroup and the cgroups below it, deepest first; it
// fails while any of them holds a process.
func removeTree(dir string) error {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			_ = removeTree(filepath.Join(dir, e.Name()))
		}
	}
	err := syscall.Rmdir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// InCgroup starts a command in the cgroup opened by Cgroup.
func InCgroup(cg *os.File) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
}
