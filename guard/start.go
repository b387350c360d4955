package guard

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// start starts a generation's processes: each from its slot's warm
// interpreter where one is idle and healthy, else forked cold.
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
	s.learn.newGeneration()
	r := &run{procs: map[int]*proc{}, watchdogs: map[int]int{}, gen: c.Generation, startedAt: MonoNow(), watch: c.Watch}
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
	warm, inPlace := 0, 0
	var began []string // only where the guard keeps started spares
	for slot, p := range c.Procs {
		how := s.howItWouldBegin(slot)
		p.Env = s.watchCommitEnv(c.Seq, slot, p.Env)
		if p.Path == "" {
			p.Path = p.Argv[0]
		}
		env := s.procEnv(p)
		if pr := s.useParked(slot, p, env, c.Generation); pr != nil {
			began = append(began, how)
			inPlace++
			s.track(r, pr)
			pids = append(pids, pr.pid)
			continue
		}
		began = append(began, s.coldStart(slot))
		if w := s.useWarm(slot, p, env, c.Generation); w != nil {
			w.proc.slot, w.proc.cmd = slot, p
			warm++
			s.track(r, w.proc)
			pids = append(pids, w.proc.pid)
			continue
		}
		pr, err := s.fork(p, env, c.Generation)
		if pr != nil {
			pr.slot, pr.cmd = slot, p
		}
		if err != nil {
			s.killRun()
			s.clearOwed = true
			s.out.send(Report{Event: EventStartFailed, Seq: c.Seq, Error: err.Error(), Code: execFailureCode(err)})
			return
		}
		s.track(r, pr)
		pids = append(pids, pr.pid)
	}
	s.clearOwed = true
	if len(s.spares) == 0 {
		began = nil
	}
	s.out.send(Report{Event: EventStarted, Seq: c.Seq, Pids: pids, Warm: warm, InPlace: inPlace, Began: began})
}

// procEnv is the environment of p's process: p's, with the guard's own
// variables; without a progress page's, which the guard sets where it
// gives one.
func (s *server) procEnv(p Proc) []string {
	return withEnv(withoutEnv(p.Env, EnvProgressFD), EnvFenceSocket+"="+s.socket, EnvCoordinator+"="+s.cfg.Executable, EnvGuardID+"="+s.cfg.Marker)
}

// fork starts p's process cold, with its output forwarded line by line,
// and its progress page of generation gen as descriptor 3 (none where the
// kernel has no memfd).
func (s *server) fork(p Proc, env []string, gen int64) (*proc, error) {
	var extra []uintptr
	page, err := newProgressPage()
	if err == nil {
		page.setGeneration(gen)
		extra = []uintptr{uintptr(page.fd)}
		env = withEnv(env, EnvProgressFD+"="+strconv.Itoa(progressFDCold))
	}
	p.Env = env
	stdout, stderr, log := s.outputOf(p)
	pr, out, errw, err := s.spawn(p, s.cg, extra, stdout, stderr, log)
	if err != nil {
		page.close()
		if log != nil {
			log.finish("not started: " + err.Error())
		}
		return nil, err
	}
	if page != nil {
		page.closeFD()
	}
	pr.page, pr.out, pr.errw = page, out, errw
	return pr, nil
}

// spawn forks and execs p in its own process group, in cgroup cg if not
// nil, with extra descriptors from 3 on, and forwards its output line by
// line with p's prefix to stdout and stderr (nil: not forwarded) and log
// (nil: none), until the writers it returns are set elsewhere.
func (s *server) spawn(p Proc, cg *cgroup, extra []uintptr, stdout, stderr io.Writer, log *logFile) (*proc, *lineWriter, *lineWriter, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, nil, nil, err
	}
	path := p.Argv[0]
	if p.Path != "" {
		path = p.Path
	}
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	files := append([]uintptr{s.devnull.Fd(), outW.Fd(), errW.Fd()}, extra...)
	attr := &syscall.ProcAttr{Dir: p.Dir, Env: p.Env, Files: files, Sys: sys}
	if cg != nil {
		sys.UseCgroupFD, sys.CgroupFD = true, cg.fd()
	}
	pid, err := syscall.ForkExec(path, p.Argv, attr)
	if err != nil && cg != nil && cgroupRefused(err) {
		// clone3 into a cgroup is not possible here: go on without one.
		s.dropCgroups()
		sys.UseCgroupFD = false
		pid, err = syscall.ForkExec(path, p.Argv, attr)
	}
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, nil, nil, fmt.Errorf("start %s: %w", p.Argv[0], err)
	}
	pr := &proc{rank: p.Rank, pid: pid, output: make(chan struct{}), log: log}
	writers := [2]*lineWriter{}
	var wg sync.WaitGroup
	for i, r := range []*os.File{outR, errR} {
		w := newLineWriter(&s.outMu, []io.Writer{stdout, stderr}[i], p.Prefix, log)
		writers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = io.Copy(w, r)
			w.Flush()
			r.Close()
		}()
	}
	go func() {
		wg.Wait()
		close(pr.output)
	}()
	return pr, writers[0], writers[1], nil
}

// outputOf is where p's output goes: the guard's stdout and stderr (nil
// for none), and its log file (nil for none).
func (s *server) outputOf(p Proc) (stdout, stderr io.Writer, log *logFile) {
	stdout, stderr = s.cfg.Stdout, s.cfg.Stderr
	if p.Log != nil {
		var err error
		if log, err = openLog(*p.Log); err != nil {
			// The output is not lost: it goes to the terminal instead.
			fmt.Fprintf(s.cfg.Stderr, "%sguard: log file: %v; this process's output goes here\n", p.Prefix, err)
		} else if p.Quiet {
			stdout, stderr = nil, nil
		}
	}
	return stdout, stderr, log
}

// retarget makes a used warm interpreter the trainer of p: its output goes
// where p's goes from now on.
func (s *server) retarget(w *warmProc, p Proc) {
	stdout, stderr, log := s.outputOf(p)
	w.proc.rank, w.proc.log = p.Rank, log
	w.out.set(stdout, p.Prefix, log)
	w.err.set(stderr, p.Prefix, log)
}

// dropCgroups goes on without cgroups: clone3 into one is refused here.
func (s *server) dropCgroups() {
	if s.cg != nil {
		s.cg.remove()
		s.cg = nil
	}
	if s.warm.cg != nil {
		s.warm.cg.remove()
		s.warm.cg = nil
	}
	if s.parkCg != nil {
		s.parkCg.remove()
		s.parkCg = nil
	}
	s.cgRoot = nil
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
	r.ranks = append(r.ranks, &rankWatch{p: pr})
	r.groups = append(r.groups, pr.pid)
	r.unwatched = append(r.unwatched, pr.pid)
	s.commits.claim(pr.pid)
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

// withoutEnv is env without the variable name.
func withoutEnv(env []string, name string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
