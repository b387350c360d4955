package launcher

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/guard"
)

// Sweep kills what is left of a dead guard's processes: its cgroup, and
// every process whose environment carries the guard's marker, reaping those
// re-parented to this process (a child subreaper). In a child subreaper it
// also kills every process below this one that is not a guard or below
// one: what a dead guard's processes left is re-parented here, and a
// process may carry no marker (it cleared its environment, as env -i, a
// sandbox or a daemon rewriting its environment block does). It returns
// once none is found.
func Sweep(marker, cgroup string) {
	_ = guard.KillCgroup(cgroup)
	needle := []byte(guard.EnvGuardID + "=" + marker + "\x00")
	self := os.Getpid()
	subreaper := guard.IsSubreaper()
	for range 500 {
		pids := marked(needle)
		if subreaper {
			pids = append(pids, orphans(self)...)
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range pids {
			if ppid, ok := guard.ParentOf(pid); ok && ppid == self {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, 0, nil)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	guard.RemoveCgroup(cgroup)
}

// orphans lists the processes below self that are neither a guard, a
// child of self, nor below one.
func orphans(self int) []int { return guard.DescendantsExcept(self, guard.IsGuardProcess) }

// marked lists the live processes whose environment holds needle.
func marked(needle []byte) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, needle) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// signalName names a signal by number, as the shell does.
func signalName(sig int) string { return syscall.Signal(sig).String() }
