package guard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvGuardID is set in every training process's environment to the guard's
// marker, so that a sidecar whose guard died can find what is left of them.
const EnvGuardID = "ELASTIC_GUARD_ID"

// outputDrain bounds how long an exit report waits for the last output of
// its process (a descendant may hold the pipe open).
const outputDrain = 100 * time.Millisecond

// sweepInterval is how often a kill in progress looks again for processes
// that a dying parent left behind or forked at the last moment.
const sweepInterval = 20 * time.Millisecond

// Config configures Run.
type Config struct {
	// Control is the guard's end of the socket pair to its sidecar.
	Control *os.File
	// Stdout and Stderr receive the processes' output, line by line with
	// each process's prefix.
	Stdout, Stderr io.Writer
	// Cgroup puts the processes in a cgroup v2 of the guard's own when one
	// is writable.
	Cgroup bool
	// Executable is the coordinator binary, given to the processes as
	// ELASTIC_COORDINATOR for `commit` from shell scripts.
	Executable string
	// Marker is given to the processes as ELASTIC_GUARD_ID.
	Marker string
}

// proc is a started process that leads its process group.
type proc struct {
	rank   int
	pid    int
	output chan struct{} // closed when its stdout and stderr reached EOF
	log    *logFile      // nil without one
}

// run is one start's processes.
type run struct {
	procs   map[int]*proc // by pid, until reaped
	groups  []int         // process group ids
	reports sync.WaitGroup
}

// server is the guard's state, owned by its loop.
type server struct {
	cfg   Config
	self  int
	out   *reportWriter
	outMu sync.Mutex
	// stdout and stderr count what cfg.Stdout and cfg.Stderr were given.
	stdout, stderr *countingWriter
	cgRoot         *cgroupRoot
	cg             *cgroup // the current start's leaf
	devnull        *os.File
	socket         string

	seq    int64 // last command processed
	lease  int64
	killAt int64 // CLOCK_MONOTONIC ns
	fenced bool  // the processes of lease were killed: no start, no commit
	gen    int64
	cur    *run

	children  bool // a child may be left
	killing   bool
	clearOwed bool // a clear report is due once no child is left

	killTimer  *time.Timer
	graceTimer *time.Timer
	sweep      *time.Ticker
}

// Run is the guard's life. It must be called on the main goroutine,
// locked to the main OS thread (as during package initialisation), since
// the processes' Pdeathsig follows the thread that forked them. It returns
// the process's exit code once the socket is closed and no process is left.
func Run(cfg Config) int {
	runtime.LockOSThread()
	stdout, stderr := &countingWriter{out: cfg.Stdout}, &countingWriter{out: cfg.Stderr}
	cfg.Stdout, cfg.Stderr = stdout, stderr
	s := &server{cfg: cfg, self: os.Getpid(), stdout: stdout, stderr: stderr}
	if err := BecomeSubreaper(); err != nil {
		fmt.Fprintf(cfg.Stderr, "guard: %v\n", err)
		return 1
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "guard: %v\n", err)
		return 1
	}
	s.devnull = devnull
	if cfg.Cgroup {
		// Without a cgroup the guard still owns the tree as its subreaper.
		s.cgRoot, _ = newCgroupRoot("elastic-guard-" + strconv.Itoa(s.self))
	}
	defer func() {
		if s.cg != nil {
			s.cg.remove()
		}
		if s.cgRoot != nil {
			s.cgRoot.remove()
		}
	}()

	// Handlers, not SIG_IGN: an ignored signal stays ignored in the
	// processes the guard starts. The guard acts on its socket only.
	quiet := make(chan os.Signal, 8)
	signal.Notify(quiet, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)

	listener, socket, err := listenCommits(cfg.Marker)
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "guard: commit socket: %v\n", err)
		return 1
	}
	s.socket = socket
	done := make(chan struct{})
	defer close(done)
	calls := make(chan commitCall)
	go serveCommits(listener, s.self, calls, done)
	defer listener.Close()

	s.out = newReportWriter(cfg.Control)
	defer s.out.close()
	ready := Report{Event: EventReady, Pid: s.self}
	if s.cgRoot != nil {
		ready.Cgroup = s.cgRoot.path
	}
	s.out.send(ready)

	cmds := readCommands(cfg.Control)
	s.killTimer = time.NewTimer(time.Hour)
	s.killTimer.Stop()
	s.graceTimer = time.NewTimer(time.Hour)
	s.graceTimer.Stop()
	s.sweep = time.NewTicker(time.Hour)
	s.sweep.Stop()
	closing := false
	for {
		select {
		case c, ok := <-cmds:
			if !ok {
				// The sidecar is gone: nothing may outlive it.
				closing, cmds = true, nil
				s.lease, s.fenced = 0, true
				s.killTree()
				break
			}
			s.handle(c)
		case <-sigchld:
		case <-s.killTimer.C:
			s.checkDeadline()
		case <-s.graceTimer.C:
			s.killTree()
		case <-s.sweep.C:
			if s.killing {
				s.killTree()
			}
		case call := <-calls:
			call.reply <- s.answer(call.req)
		case <-quiet:
		}
		s.reap()
		if closing && !s.children {
			return 0
		}
	}
}

// handle carries out one command.
func (s *server) handle(c Command) {
	s.seq = c.Seq
	switch c.Op {
	case OpDeadline:
		if c.Lease != s.lease {
			// Processes of another lease have no say any more; the sidecar
			// never gets here with any left, but if it did they go.
			s.killTree()
			s.lease, s.fenced = c.Lease, false
		}
		if !s.fenced {
			s.killAt = c.KillAt
			s.armKillTimer()
		}
	case OpStart:
		s.start(c)
	case OpStop:
		s.clearOwed = true
		if s.expired() {
			s.fence()
			return
		}
		if grace := time.Duration(c.GraceNanos); grace > 0 && s.cur != nil {
			for _, pgid := range s.cur.groups {
				_ = syscall.Kill(-pgid, syscall.SIGTERM)
			}
			s.graceTimer.Reset(grace)
			return
		}
		s.killTree()
	case OpKill:
		s.clearOwed = true
		s.lease, s.fenced = 0, true
		s.killTree()
	}
}

// expired reports whether the processes may no longer run.
func (s *server) expired() bool {
	return s.lease == 0 || s.fenced || MonoNow() >= s.killAt
}

func (s *server) armKillTimer() {
	s.killTimer.Stop()
	s.killTimer.Reset(time.Duration(max(s.killAt-MonoNow(), 0)))
}

// checkDeadline fences the node when its deadline has passed.
func (s *server) checkDeadline() {
	if s.lease == 0 || s.fenced {
		return
	}
	if now := MonoNow(); now < s.killAt {
		s.armKillTimer() // woke early, or the deadline moved
		return
	}
	s.fence()
}

// fence kills everything because the lease may be gone.
func (s *server) fence() {
	alreadyFenced := s.fenced
	s.fenced = true
	s.clearOwed = true
	s.killTree()
	if !alreadyFenced && s.lease != 0 {
		fmt.Fprintf(s.cfg.Stderr, "%s guard: the lease deadline passed; killed every training process\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"))
		s.out.send(Report{Event: EventFenced, Seq: s.seq, Lease: s.lease})
	}
}

// start forks a generation's processes.
func (s *server) start(c Command) {
	s.reap()
	switch {
	case s.children:
		s.out.send(Report{Event: EventStartFailed, Seq: c.Seq, Error: "processes of the previous generation are still running"})
		return
	case c.Lease != s.lease || s.expired():
		s.out.send(Report{Event: EventStartFailed, Seq: c.Seq, Error: "the node's lease is not current; it was fenced out"})
		return
	}
	s.gen = c.Generation
	r := &run{procs: map[int]*proc{}}
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
	s.children = true
	pr := &proc{rank: p.Rank, pid: pid, output: make(chan struct{})}
	r.procs[pid] = pr
	r.groups = append(r.groups, pid)
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
	return pid, nil
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

// killTree kills every process below the guard, and keeps looking until
// none is left.
func (s *server) killTree() {
	s.graceTimer.Stop()
	if !s.children {
		return
	}
	if !s.killing {
		s.killing = true
		s.sweep.Reset(sweepInterval)
	}
	if s.cg != nil {
		_ = s.cg.kill()
	}
	if s.cur != nil {
		for _, pgid := range s.cur.groups {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	killAll(s.self)
}

// reap collects every child that exited, reports the exits of the
// processes it started, and notes when no child is left.
func (s *server) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.ECHILD) {
			s.children = false
			break
		}
		if err != nil || pid == 0 {
			break
		}
		if s.cur == nil {
			continue
		}
		if p, ok := s.cur.procs[pid]; ok {
			delete(s.cur.procs, pid)
			s.reportExit(s.cur, p, ws)
		}
	}
	if s.children {
		return
	}
	if s.killing {
		s.killing = false
		s.sweep.Stop()
	}
	if s.cg != nil {
		s.cg.remove() // empty now; a leaf is never used twice
		s.cg = nil
	}
	s.graceTimer.Stop()
	if s.clearOwed {
		s.clearOwed = false
		r, seq := s.cur, s.seq
		go func() {
			if r != nil {
				r.reports.Wait() // exits first, then clear
			}
			s.out.send(Report{Event: EventClear, Seq: seq})
		}()
	}
}

// reportExit reports a started process's exit once its output is flushed.
func (s *server) reportExit(r *run, p *proc, ws syscall.WaitStatus) {
	rep := Report{Event: EventExit, Seq: s.seq, Pid: p.pid, Rank: p.rank, Code: ws.ExitStatus()}
	if ws.Signaled() {
		rep.Signal = int(ws.Signal())
		rep.Code = 128 + rep.Signal
	}
	r.reports.Add(1)
	go func() {
		defer r.reports.Done()
		select {
		case <-p.output:
		case <-time.After(outputDrain):
		}
		if p.log != nil {
			how := fmt.Sprintf("exited with code %d", rep.Code)
			if rep.Signal != 0 {
				how = fmt.Sprintf("killed by signal %d (%s)", rep.Signal, syscall.Signal(rep.Signal))
			}
			p.log.finish(how)
		}
		rep.StdoutBytes, rep.StderrBytes = s.stdout.n.Load(), s.stderr.n.Load()
		s.out.send(rep)
	}()
}

// answer decides a training process's commit request.
func (s *server) answer(req CommitRequest) string {
	switch {
	case s.lease == 0 || s.fenced:
		return "refused: this node was fenced out: its lease is lost"
	case req.Generation != s.gen:
		return fmt.Sprintf("refused: generation %d is over; this node runs generation %d", req.Generation, s.gen)
	case s.killing:
		return "refused: the processes are being killed"
	case MonoNow() >= s.killAt:
		return "refused: the lease deadline has passed"
	}
	if req.Op == "rename" {
		if err := os.Rename(req.Src, req.Dst); err != nil {
			return "error: " + err.Error()
		}
	}
	return "ok"
}

// listenCommits opens the commit socket under an abstract name, which
// needs no file and vanishes with the guard.
func listenCommits(marker string) (*listener, string, error) {
	name := fmt.Sprintf("@elastic-guard-%d-%s", os.Getpid(), marker)
	l, err := listenUnix(name)
	if err != nil {
		return nil, "", err
	}
	return l, name, nil
}

// readCommands delivers the sidecar's commands; the channel closes when the
// socket does. A malformed line is a broken sidecar: it closes too.
func readCommands(f *os.File) <-chan Command {
	out := make(chan Command)
	go func() {
		defer close(out)
		r := bufio.NewReaderSize(f, 64<<10)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			c, err := DecodeCommand(line)
			if err != nil {
				return
			}
			out <- c
		}
	}()
	return out
}

// reportWriter sends reports in order without ever blocking the loop: a
// frozen sidecar does not read its socket.
type reportWriter struct {
	mu    sync.Mutex
	queue []Report
	wake  chan struct{}
	done  chan struct{}
	w     io.Writer
}

func newReportWriter(w io.Writer) *reportWriter {
	rw := &reportWriter{w: w, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go rw.loop()
	return rw
}

func (rw *reportWriter) send(r Report) {
	rw.mu.Lock()
	rw.queue = append(rw.queue, r)
	rw.mu.Unlock()
	select {
	case rw.wake <- struct{}{}:
	default:
	}
}

func (rw *reportWriter) loop() {
	for {
		select {
		case <-rw.wake:
		case <-rw.done:
			return
		}
		rw.mu.Lock()
		batch := rw.queue
		rw.queue = nil
		rw.mu.Unlock()
		for _, r := range batch {
			line, err := encodeLine(r)
			if err != nil {
				continue
			}
			if _, err := rw.w.Write(line); err != nil {
				return // the sidecar is gone; the loop sees the socket close
			}
		}
	}
}

func (rw *reportWriter) close() { close(rw.done) }

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
