package guard

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupRoot is a cgroup v2 of the guard's own, below the guard's cgroup.
// Each start's processes go to a new leaf below it (clone3 with
// CLONE_INTO_CGROUP), which is killed as a unit through cgroup.kill, so a
// process forking while it is killed cannot slip out. A leaf is never
// reused: some kernels kill every process that later joins a cgroup that
// was killed.
type cgroupRoot struct {
	path string
	runs int
}

// newCgroupRoot creates the guard's cgroup, or says why it cannot.
func newCgroupRoot(name string) (*cgroupRoot, error) {
	own, err := OwnCgroupDir()
	if err != nil {
		return nil, err
	}
	removeStale(own)
	dir := path.Join(own, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	if _, err := os.Stat(path.Join(dir, "cgroup.kill")); err != nil {
		_ = syscall.Rmdir(dir)
		return nil, errors.New("cgroup.kill missing (Linux before 5.14)")
	}
	return &cgroupRoot{path: dir}, nil
}

// removeStale kills what the cgroups of guards that are gone still hold,
// and removes them: a guard killed with SIGKILL cannot clean up, and when
// its sidecar was killed with it, what its processes started runs on,
// re-parented to init.
func removeStale(own string) (killed int) {
	entries, _ := os.ReadDir(own)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "elastic-guard-")
		if !ok || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(rest)
		if err != nil || isGuard(pid) {
			continue
		}
		dir := path.Join(own, e.Name())
		if populated(dir) {
			killed++
			_ = KillCgroup(dir)
			for i := 0; i < 500 && populated(dir); i++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
		RemoveCgroup(dir)
	}
	return killed
}

// KillLeftovers kills the processes left in the cgroups of dead guards
// below the calling process's cgroup, and removes those cgroups. A sidecar
// calls it when it starts, before it registers: a sidecar killed together
// with its guard (kill -9 of both) leaves the training command's
// descendants running, and its successor must not join a job beside them.
// It reports how many cgroups held processes.
func KillLeftovers() int {
	own, err := OwnCgroupDir()
	if err != nil {
		return 0
	}
	return removeStale(own)
}

// populated reports whether a process is in the cgroup at dir or below.
func populated(dir string) bool {
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

// isGuard reports whether pid is a running guard.
func isGuard(pid int) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(string(cmdline), "\x00")
	return len(args) > 1 && args[1] == "guard"
}

// newRun creates the leaf of one start.
func (r *cgroupRoot) newRun() (*cgroup, error) {
	r.runs++
	return r.newLeaf("run-" + strconv.Itoa(r.runs))
}

// newLeaf creates a leaf below the guard's cgroup.
func (r *cgroupRoot) newLeaf(name string) (*cgroup, error) {
	dir := path.Join(r.path, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	f, err := os.Open(dir)
	if err != nil {
		_ = syscall.Rmdir(dir)
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	return &cgroup{path: dir, dir: f}, nil
}

// remove deletes the guard's (empty) cgroup.
func (r *cgroupRoot) remove() { _ = syscall.Rmdir(r.path) }

// cgroup is the leaf of one start's processes.
type cgroup struct {
	path string
	dir  *os.File // passed to clone3
}

// fd is the directory's descriptor for clone3.
func (c *cgroup) fd() int { return int(c.dir.Fd()) }

// kill kills every process in the cgroup at once.
func (c *cgroup) kill() error {
	return os.WriteFile(path.Join(c.path, "cgroup.kill"), []byte("1"), 0)
}

// remove deletes the (empty) cgroup.
func (c *cgroup) remove() {
	_ = c.dir.Close()
	_ = syscall.Rmdir(c.path)
}

// KillCgroup kills every process in the cgroup at dir and below, for a
// sidecar that cleans up after a guard that died.
func KillCgroup(dir string) error {
	if dir == "" {
		return nil
	}
	err := os.WriteFile(path.Join(dir, "cgroup.kill"), []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// RemoveCgroup deletes the cgroup a guard that died left, once empty.
func RemoveCgroup(dir string) {
	if dir == "" {
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			_ = syscall.Rmdir(path.Join(dir, e.Name()))
		}
	}
	_ = syscall.Rmdir(dir)
}

// OwnCgroupDir is the directory of the calling process's cgroup in the
// cgroup v2 hierarchy.
func OwnCgroupDir() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var rel string
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel, found = p, true
		}
	}
	if !found {
		return "", errors.New("no cgroup v2 hierarchy")
	}
	mount, root, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	rel, ok := strings.CutPrefix(rel, root)
	if !ok {
		return "", fmt.Errorf("cgroup %s is outside the mounted hierarchy %s", rel, root)
	}
	return path.Join(mount, rel), nil
}

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted, and which of
// its directories the mount shows.
func cgroup2Mount() (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source super
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 || fields[sep+1] != "cgroup2" {
			continue
		}
		return unescapeMount(fields[4]), unescapeMount(fields[3]), nil
	}
	return "", "", errors.New("cgroup v2 is not mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
