package guard

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
)

// cgroup is a cgroup v2 of the guard's own, below the guard's cgroup, that
// every training process is started in (clone3 with CLONE_INTO_CGROUP). It
// is killed as a unit through cgroup.kill, so a process forking while it is
// killed cannot slip out.
type cgroup struct {
	path string
	dir  *os.File // passed to clone3
}

// newCgroup creates the guard's cgroup, or says why it cannot.
func newCgroup(name string) (*cgroup, error) {
	own, err := ownCgroupDir()
	if err != nil {
		return nil, err
	}
	dirPath := path.Join(own, name)
	if err := os.Mkdir(dirPath, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	cg := &cgroup{path: dirPath}
	if _, err := os.Stat(path.Join(dirPath, "cgroup.kill")); err != nil {
		cg.remove()
		return nil, errors.New("cgroup.kill missing (Linux before 5.14)")
	}
	dir, err := os.Open(dirPath)
	if err != nil {
		cg.remove()
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	cg.dir = dir
	return cg, nil
}

// fd is the directory's descriptor for clone3.
func (c *cgroup) fd() int { return int(c.dir.Fd()) }

// kill kills every process in the cgroup at once.
func (c *cgroup) kill() error {
	return os.WriteFile(path.Join(c.path, "cgroup.kill"), []byte("1"), 0)
}

// populated reports whether a process is left in the cgroup.
func (c *cgroup) populated() bool {
	data, err := os.ReadFile(path.Join(c.path, "cgroup.events"))
	if err != nil {
		return false
	}
	return bytes.Contains(data, []byte("populated 1"))
}

// remove deletes the (empty) cgroup.
func (c *cgroup) remove() {
	if c.dir != nil {
		_ = c.dir.Close()
	}
	_ = syscall.Rmdir(c.path)
}

// KillCgroup kills every process in the cgroup at path, for a sidecar that
// cleans up after a guard that died.
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

// RemoveCgroup deletes an empty cgroup left by a guard that died.
func RemoveCgroup(dir string) {
	if dir != "" {
		_ = syscall.Rmdir(dir)
	}
}

// ownCgroupDir is the directory of the calling process's cgroup in the
// cgroup v2 hierarchy.
func ownCgroupDir() (string, error) {
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
