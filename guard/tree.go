package guard

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BecomeSubreaper makes the calling process a child subreaper: orphans
// below it are re-parented to it instead of to init.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become a child subreaper: %w", err)
	}
	return nil
}

// IsSubreaper reports whether the calling process is a child subreaper.
func IsSubreaper() bool {
	var v int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0); err != nil {
		return false
	}
	return v != 0
}

// IsGuardProcess reports whether pid runs `coordinator guard`.
func IsGuardProcess(pid int) bool { return isGuard(pid) }

// MonoNow is CLOCK_MONOTONIC in nanoseconds, the clock of deadlines shared
// by the sidecar and the guard. It keeps counting while a process is
// stopped.
func MonoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// ParentOf reads a process's parent id from /proc; ok is false once the
// process is gone.
func ParentOf(pid int) (ppid int, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The state and the parent follow the command name, which is in
	// parentheses and may itself hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	fields := bytes.Fields(data[i+1:])
	if len(fields) < 2 {
		return 0, false
	}
	ppid, err = strconv.Atoi(string(fields[1]))
	return ppid, err == nil
}

// Descendants lists every live process below root, found through the
// parent links in /proc.
func Descendants(root int) []int { return DescendantsExcept(root, nil) }

// DescendantsExcept lists the live processes below root but for the
// children of root that skip reports, and everything below them.
func DescendantsExcept(root int, skip func(pid int) bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := ParentOf(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out, queue []int
	for _, pid := range children[root] {
		if skip == nil || !skip(pid) {
			queue = append(queue, pid)
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

// killProcessTree kills the process pid leads: its process group, pid, and
// what runs below it, found before it dies and they are re-parented. A
// process forked meanwhile is left to a sweep.
func killProcessTree(pid int) {
	below := Descendants(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, d := range below {
		_ = syscall.Kill(d, syscall.SIGKILL)
	}
}

// IsDescendant reports whether pid runs below root.
func IsDescendant(pid, root int) bool {
	for range 1024 { // deeper than any real tree; guards against a loop
		ppid, ok := ParentOf(pid)
		if !ok || ppid <= 1 {
			return ppid == root
		}
		if ppid == root {
			return true
		}
		pid = ppid
	}
	return false
}

// killAll sends SIGKILL to every process below root.
func killAll(root int) int {
	pids := Descendants(root)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}

// ProcStat is what /proc/PID/stat says of a process: enough to tell it apart
// from a later process that reuses its pid (Start, in clock ticks since
// boot), and whether it still runs (a zombie runs nothing).
type ProcStat struct {
	Parent int
	State  byte
	Start  uint64
}

// Running reports whether the process can still run code: neither a
// zombie nor dead.
func (p ProcStat) Running() bool { return p.State != 'Z' && p.State != 'X' && p.State != 'x' }

// ReadProc reads a process's stat line; ok is false once it is gone.
func ReadProc(pid int) (p ProcStat, ok bool) {
	if pid <= 0 {
		return ProcStat{}, false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{}, false
	}
	return parseStat(data)
}

// parseStat takes apart a stat line: the fields after the command name,
// which is in parentheses and may itself hold spaces and parentheses, are
// the state (3), the parent (4) and the start time (22).
func parseStat(data []byte) (ProcStat, bool) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return ProcStat{}, false
	}
	fields := bytes.Fields(data[i+1:])
	if len(fields) < 20 || len(fields[0]) != 1 {
		return ProcStat{}, false
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	if err != nil {
		return ProcStat{}, false
	}
	start, err := strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return ProcStat{}, false
	}
	return ProcStat{Parent: ppid, State: fields[0][0], Start: start}, true
}
