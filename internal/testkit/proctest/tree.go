package proctest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/elastictraining/coordinator/guard"
)

// FreezeTree stops a process and everything below it with SIGSTOP, as a
// paused container or a frozen machine is, and returns them top down. It
// goes round until nothing new appears, so that a child forked in the
// moment between two stops is stopped too.
func FreezeTree(root int) []int {
	if root <= 0 {
		return nil
	}
	stopped := map[int]bool{root: true}
	order := []int{root}
	if err := syscall.Kill(root, syscall.SIGSTOP); err != nil {
		return nil
	}
	for {
		fresh := 0
		for _, pid := range guard.Descendants(root) {
			if !stopped[pid] && syscall.Kill(pid, syscall.SIGSTOP) == nil {
				stopped[pid], order = true, append(order, pid)
				fresh++
			}
		}
		if fresh == 0 {
			return order
		}
	}
}

// Thaw continues stopped processes in the order given.
func Thaw(pids []int) {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
}

// Process is a live process and its command line.
type Process struct {
	Pid  int
	Args []string
}

func (p Process) String() string { return fmt.Sprintf("pid %d: %s", p.Pid, strings.Join(p.Args, " ")) }

// Marked lists the live processes (zombies aside) whose environment holds
// the entry, e.g. "ELASTIC_TEST_MARK=1f2e": the processes a test started,
// and everything they started.
func Marked(entry string) []Process {
	entries, _ := os.ReadDir("/proc")
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(append([]byte{0}, env...), []byte("\x00"+entry+"\x00")) || !Alive(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, Process{Pid: pid, Args: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")})
	}
	return out
}
