package launcher

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/guard"
)

// GuardInfo is how to find what a guard runs: its process, the marker in
// its processes' environment and its cgroup ("" without one).
type GuardInfo struct {
	Pid    int
	Marker string
	Cgroup string
}

// reclaimTimeout bounds how long Reclaim waits for what it killed to be
// gone.
const reclaimTimeout = 5 * time.Second

// ErrLeftRunning is returned by Reclaim when something of the guard's
// processes is still there after it was killed.
var ErrLeftRunning = errors.New("launcher: processes of the previous guard are still running")

// Reclaim kills everything a guard started by an earlier sidecar of this
// node ran, and the guard itself: the processes below the guard while it
// runs (frozen or not: SIGKILL reaches a stopped process), its cgroup, and
// every process that carries its marker, then the guard, which is known by
// its pid and its start time (start, 0 for a guard known dead) so that a
// later process that reuses the pid is left alone. It returns nil only
// once none of them can run anything any more, and ErrLeftRunning when
// some still can after reclaimTimeout: the caller must then not count them
// dead.
func Reclaim(g GuardInfo, start uint64) error {
	if g.Marker == "" {
		return errors.New("launcher: reclaim: no marker")
	}
	running := func() bool {
		p, ok := guard.ReadProc(g.Pid)
		return ok && start != 0 && p.Start == start && p.Running()
	}
	// Below a running guard first: what cleared its environment and has
	// no cgroup is found only there, and is re-parented away once the
	// guard dies.
	if running() {
		killBelow(g.Pid)
	}
	Sweep(g.Marker, g.Cgroup)
	if running() {
		killBelow(g.Pid)
		_ = syscall.Kill(g.Pid, syscall.SIGKILL)
	}
	needle := []byte(guard.EnvGuardID + "=" + g.Marker + "\x00")
	deadline := time.Now().Add(reclaimTimeout)
	for {
		left := len(marked(needle)) > 0 || populated(g.Cgroup) || running()
		if !left {
			guard.RemoveCgroup(g.Cgroup)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (guard %d, marker %s)", ErrLeftRunning, g.Pid, g.Marker)
		}
		_ = guard.KillCgroup(g.Cgroup)
		for _, pid := range marked(needle) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killBelow kills the running processes below root until none is left; a
// zombie, which runs nothing, stays until its parent reaps it.
func killBelow(root int) {
	for range 100 {
		var live []int
		for _, pid := range guard.Descendants(root) {
			if p, ok := guard.ReadProc(pid); ok && p.Running() {
				live = append(live, pid)
			}
		}
		if len(live) == 0 {
			return
		}
		for _, pid := range live {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// populated reports whether a process is in the cgroup at dir or below; a
// cgroup that is not there holds none.
func populated(dir string) bool {
	if dir == "" {
		return false
	}
	data, err := os.ReadFile(path.Join(dir, "cgroup.events"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return v != "0"
		}
	}
	return false
}
