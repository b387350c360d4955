package guard

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
)

// start forks a generation's processes.
func (s *server) start(c Command) {
	s.reap()
	if s.children && s.cur != nil && s.cur.awaitWatchdogs() {
		s.reap()
	}
	switch {
	case s.children:
		s.out.send(Report{Event: EventStartFailed, Seq: c.Seq, Error: "processes of the previous generation are still running"})
		return
	case c.Lease != s.lease || s.expired():
		s.out.send(Report{Event: EventStartFailed, Seq: c.Seq, Error: "the node's lease is not current; it was fenced out"})
		return
	}
	s.gen = c.Generation
	r := &run{procs: map[int]*proc{}, watchdogs: map[int]int{}}
	s.cur = r
	if s.cg != nil {
		s.cg.remove()
		s.cg = nil
	}
	if s.cgRoot != nil {
		cg, err := s.cgRoot.newRun()
		if err != nil {
			s.cgRoot = nil // go on without
		}
		s.cg = cg
	}
	pids := make([]int, 0, len(c.Procs))
	for _, p := range c.Procs {
		pid, err := s.fork(r, p)
		if err != nil {
			s.killTree()
			s.clearOwed = true
			s.out.send(Report{Event: EventStartFailed, Seq: c.Seq, Error: err.Error(), Code: execFailureCode(err)})
			return
		}
		pids = append(pids, pid)
	}
	s.clearOwed = true
	s.out.send(Report{Event: EventStarted, Seq: c.Seq, Pids: pids})
}

// fork starts one process in its own process group, with its output
// forwarded line by line.
func (s *server) fork(r *run, p Proc) (int, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return 0, err
	}
	env := withEnv(p.Env, EnvFenceSocket+"="+s.socket, EnvCoordinator+"="+s.cfg.Executable, EnvGuardID+"="+s.cfg.Marker)
	path := p.Argv[0]
	if p.Path != "" {
		path = p.Path
	}
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	attr := &syscall.ProcAttr{Dir: p.Dir, Env: env, Files: []uintptr{s.devnull.Fd(), outW.Fd(), errW.Fd()}, Sys: sys}
	if s.cg != nil {
		sys.UseCgroupFD, sys.CgroupFD = true, s.cg.fd()
	}
	pid, err := syscall.ForkExec(path, p.Argv, attr)
	if err != nil && s.cg != nil && cgroupRefused(err) {
		// clone3 into a cgroup is not possible here: go on without one.
		s.cg.remove()
		s.cg, s.cgRoot = nil, nil
		sys.UseCgroupFD = false
		pid, err = syscall.ForkExec(path, p.Argv, attr)
	}
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return 0, fmt.Errorf("start %s: %w", p.Argv[0], err)
	}
	pr := &proc{rank: p.Rank, pid: pid, output: make(chan struct{})}
	stdout, stderr := s.cfg.Stdout, s.cfg.Stderr
	if p.Log != nil {
		if pr.log, err = openLog(*p.Log); err != nil {
			// The output is not lost: it goes to the terminal instead.
			fmt.Fprintf(s.cfg.Stderr, "%sguard: log file: %v; this process's output goes here\n", p.Prefix, err)
		} else if p.Quiet {
			stdout, stderr = nil, nil
		}
	}
	var wg sync.WaitGroup
	for _, f := range []struct {
		r   *os.File
		out io.Writer
	}{{outR, stdout}, {errR, stderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newLineWriter(&s.outMu, f.out, p.Prefix, pr.log)
			_, _ = io.Copy(w, f.r)
			w.Flush()
			f.r.Close()
		}()
	}
	go func() {
		wg.Wait()
		close(pr.output)
	}()
	s.track(r, pr)
	return pid, nil
}

// track makes a started process one of the run's: reported when it exits,
// its process group killed with the run, and fenced by a watchdog of its
// own, which holds the deadline where the process runs. Every process the
// guard hands a generation to goes through here. The watchdog starts at
// the end of the loop's turn (watchTracked), once the command is answered,
// so that starting it delays neither the other processes nor the report.
func (s *server) track(r *run, pr *proc) {
	s.children = true
	r.procs[pr.pid] = pr
	r.groups = append(r.groups, pr.pid)
	r.unwatched = append(r.unwatched, pr.pid)
}

// execFailureCode is the exit code a shell gives a command it cannot run:
// 127 when it is not there, 126 when it cannot be executed; 0 for a
// failure that is not the command's.
func execFailureCode(err error) int {
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR):
		return 127
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EISDIR):
		return 126
	}
	return 0
}

// cgroupRefused reports whether clone3 failed for the cgroup rather than
// for the program: an old kernel, or a cgroup that takes no processes.
func cgroupRefused(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOSYS, syscall.EINVAL, syscall.EOPNOTSUPP, syscall.EBUSY, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// withEnv is env with the given variables set, replacing any of the same
// name (a sidecar run by a training process inherits its guard's).
func withEnv(env []string, set ...string) []string {
	names := make(map[string]bool, len(set))
	for _, kv := range set {
		names[kv[:strings.IndexByte(kv, '=')]] = true
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		if i := strings.IndexByte(kv, '='); i < 0 || !names[kv[:i]] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}
