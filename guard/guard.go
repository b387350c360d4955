package guard

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
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
	// Deadline is the sidecar's DeadlinePage, handed to the fence
	// watchdog started beside each process; nil starts none.
	Deadline *os.File
}

// proc is a started process that leads its process group.
type proc struct {
	rank   int
	pid    int
	output chan struct{} // closed when its stdout and stderr reached EOF
	log    *logFile      // nil without one
	page   *progressPage // nil without one; unmapped when reaped

	// slot and cmd are the local slot and command it was started for;
	// out and errw forward its output (retargeted when it is parked and
	// started again in place); inplace is its connection if it keeps its
	// process across generations (inplace.go), else nil.
	slot      int
	cmd       Proc
	out, errw *lineWriter
	inplace   *inplaceLink
	// pendingRun is the run message of a started spare that a start made
	// a rank before it registered: it is its answer when it does.
	pendingRun *trainerMessage
}

// run is one start's processes.
type run struct {
	procs   map[int]*proc // by pid, until reaped
	groups  []int         // process group ids
	reports sync.WaitGroup
	// watchdogs are the fence watchdogs' pids, by the pid of the process
	// each watches, until reaped; unwatched are the processes tracked
	// whose watchdog is still to start.
	watchdogs map[int]int
	unwatched []int

	gen       int64
	startedAt int64  // CLOCK_MONOTONIC ns
	watch     *Watch // nil: not watched for hangs
	// ranks are the processes the hang watcher samples, in the order
	// started, until reaped.
	ranks    []*rankWatch
	stopping bool // a stop was asked for: no more hang reports
	// lastProgress is when progress was last reported; moved, whether a
	// rank stepped since, or began or ended a quiet phase (quietChanged),
	// which is reported at once.
	lastProgress int64
	moved        bool
	quietChanged bool
	// finals are the last progress of the ranks reaped, reported once
	// the last of them is (finalProgress).
	finals []RankProgress
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
	commits        watchSockets // bound this turn for the watchdogs to start

	seq    int64 // last command processed
	lease  int64
	killAt int64 // CLOCK_MONOTONIC ns
	fenced bool  // the processes of lease were killed: no start, no commit
	gen    int64
	cur    *run

	children   bool // a child other than an idle warm interpreter may be left
	killing    bool
	killingAll bool // the kill in progress takes the warm interpreters too
	clearOwed  bool // a clear report is due once no child is left
	closing    bool // the sidecar is gone: exit once nothing is left

	warm warmState
	// parked are the in-place trainers between generations, by slot, and
	// parkCg their cgroup leaf (inplace.go).
	parked map[int]*proc
	parkCg *cgroup
	// spares are the commands of the started spares, by slot; spareLost
	// the slots whose spare exited before it reached elastic.run.
	spares    map[int]Proc
	spareLost map[int]bool
	// coldWhy says, by slot, why the slot has no process waiting to
	// train: the reason its next start is cold (Report.Began).
	coldWhy map[int]string

	// learn is what the hang watcher learned of the job's steps, over
	// every generation; watching, whether its ticker runs.
	learn       learning
	watchTicker *time.Ticker
	watching    bool
	// dumpTimer ends the wait for stacks: then the run is killed
	// (dumpAll), or the ranks of dumpKill.
	dumpTimer *time.Timer
	dumpAll   bool
	dumpKill  []int
	// hungTimer ends the wait of in-place ranks reported hung that were
	// asked to leave (hungLeaveWait).
	hungTimer *time.Timer

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
	s := &server{cfg: cfg, self: os.Getpid(), stdout: stdout, stderr: stderr, warm: newWarmState(), parked: map[int]*proc{}, spareLost: map[int]bool{}, coldWhy: map[int]string{}}
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
		if s.warm.cg != nil {
			s.warm.cg.remove()
		}
		if s.parkCg != nil {
			s.parkCg.remove()
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
	said := make(chan trainerSaid)
	go serveCommits(listener, s.self, calls, said, done)
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
	s.watchTicker = time.NewTicker(time.Hour)
	s.watchTicker.Stop()
	s.dumpTimer = time.NewTimer(time.Hour)
	s.dumpTimer.Stop()
	s.hungTimer = time.NewTimer(time.Hour)
	s.hungTimer.Stop()
	for {
		select {
		case c, ok := <-cmds:
			if !ok {
				// The sidecar is gone: nothing may outlive it.
				s.closing, cmds = true, nil
				s.lease, s.fenced = 0, true
				s.killTree()
				break
			}
			s.handle(c)
		case <-sigchld:
		case <-s.killTimer.C:
			s.checkDeadline()
		case <-s.graceTimer.C:
			s.killRun()
		case <-s.dumpTimer.C:
			s.dumpsWritten()
		case <-s.hungTimer.C:
			s.hungDidNotLeave()
		case <-s.watchTicker.C:
			s.watchTick()
		case <-s.sweep.C:
			switch {
			case s.killingAll:
				s.killTree()
			case s.killing:
				s.killRun()
			}
		case <-s.warm.timer.C:
			s.fillWarm()
		case pid := <-s.warm.ready:
			s.warmIsReady(pid)
		case call := <-calls:
			if call.req.Op == OpInPlace {
				call.reply <- s.acceptInPlace(call)
			} else {
				call.reply <- s.answer(call.req)
			}
		case m := <-said:
			s.heard(m)
		case <-quiet:
		}
		s.watchTracked()
		s.reap()
		if s.closing && !s.children {
			return 0
		}
		s.armWarm()
		s.armSpares()
		s.armWatch()
	}
}

// handle carries out one command.
func (s *server) handle(c Command) {
	s.seq = c.Seq
	switch c.Op {
	case OpDeadline:
		if c.Lease != s.lease {
			// Processes of another lease have no say any more; the sidecar
			// never gets here with any left, but if it did they go. Before
			// the first lease only idle warm interpreters can run (no start
			// without a lease), which hold no rank: they stay.
			if s.lease != 0 || s.fenced {
				s.killTree()
			}
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
		if s.cur != nil {
			s.cur.stopping = true
		}
		switch grace := time.Duration(c.GraceNanos); {
		case c.Stacks:
			s.stopWithStacks()
		case grace > 0 && s.cur != nil:
			s.stopGracefully(grace)
		default:
			s.killRun()
		}
	case OpKill:
		s.clearOwed = true
		s.lease, s.fenced = 0, true
		s.killTree()
	case OpWarm:
		s.setWarm(c.Warm)
	case OpSpare:
		s.setSpares(c.Spares)
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

// killTree kills every process below the guard, warm interpreters
// included, and keeps looking until none is left: the node is fenced, or
// its sidecar gone.
func (s *server) killTree() {
	s.graceTimer.Stop()
	s.killAllWarm()
	s.killAllParked()
	if !s.children {
		return
	}
	s.killingAll = true
	s.killRun()
	killAll(s.self)
}

// killRun kills the run's processes and everything below the guard but
// the idle warm interpreters (and what is below them), and keeps looking
// until none is left: a generation's stop.
func (s *server) killRun() {
	s.graceTimer.Stop()
	s.stopDumps()
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
	for _, pid := range DescendantsExcept(s.self, s.isIdle) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// reap collects every child that exited, reports the exits of the
// processes it started, and notes when no child is left but idle warm
// interpreters.
func (s *server) reap() {
	for {
		var ws syscall.WaitStatus
		// Stops and continues too: a warm interpreter that was frozen is
		// killed.
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG|syscall.WUNTRACED|syscall.WCONTINUED, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.ECHILD) {
			s.children = false
			if s.warm.cg != nil && len(s.warm.byPid) == 0 {
				s.warm.cg.remove() // a leaf that may have been killed is not reused
				s.warm.cg = nil
			}
			break
		}
		if err != nil || pid == 0 {
			break
		}
		if ws.Stopped() || ws.Continued() {
			s.warmSignalled(pid)
			s.parkedSignalled(pid)
			continue
		}
		s.warmReaped(pid, ws)
		s.parkedReaped(pid, ws)
		if s.cur == nil {
			continue
		}
		if p, ok := s.cur.procs[pid]; ok {
			delete(s.cur.procs, pid)
			s.finalProgress(s.cur, p)
			s.cur.forget(p)
			s.reportExit(s.cur, p, ws)
			s.cur.endWatchdog(pid)
		}
		s.cur.reapedWatchdog(pid)
	}
	if s.parkCg != nil && len(s.parked) == 0 {
		s.parkCg.remove()
		s.parkCg = nil
	}
	if s.children && (len(s.warm.idle) > 0 || len(s.parked) > 0) && (s.cur == nil || len(s.cur.procs) == 0) {
		// Children are left, but maybe only idle warm interpreters and
		// parked trainers, which no generation's end waits for.
		s.children = len(DescendantsExcept(s.self, s.isIdle)) > 0
	}
	if s.children {
		return
	}
	if s.killing {
		s.killing, s.killingAll = false, false
		s.sweep.Stop()
	}
	if s.cg != nil {
		s.cg.remove() // empty now; a leaf is never used twice
		s.cg = nil
	}
	s.graceTimer.Stop()
	s.stopDumps()
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
	st := commitState{fenced: s.lease == 0 || s.fenced, generation: s.gen, killing: s.killing, killAt: s.killAt}
	if refused := st.refusal(req, MonoNow()); refused != "" {
		return refused
	}
	return carryOut(req)
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
