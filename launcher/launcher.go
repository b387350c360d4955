package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/elastictraining/coordinator/guard"
)

// DefaultGrace is how long processes get between SIGTERM and SIGKILL.
const DefaultGrace = 10 * time.Second

// guardTimeout bounds how long the launcher waits for the guard to act on a
// kill, or to take a command, before it kills the guard itself.
const guardTimeout = 2 * time.Second

// killTimeout bounds how long Kill waits for the guard to report that
// nothing is left before it kills the guard itself. Kill is the fence: it
// must be done within the fence margin (at least 250 ms), after which etcd
// may expire the lease and the next generation start. A guard that is
// healthy has killed everything on its own timer by then; one that does not
// answer (frozen, or its loop blocked) has its direct children killed with
// it (Pdeathsig) and the rest swept.
const killTimeout = 100 * time.Millisecond

// Exit is how a node's processes ended: Code 0 when every process exited 0;
// otherwise the code of the first process that failed, 128+signal for a
// process killed by a signal.
type Exit struct {
	Code    int
	Message string
}

// StartError is a command that cannot be started at all, which no restart
// mends: Code is 127 when it is not found, 126 when it cannot be executed,
// as a shell has it.
type StartError struct {
	Code int
	Err  error
}

func (e *StartError) Error() string { return e.Err.Error() }

// ExitCode is the code a shell would exit with: 126 or 127.
func (e *StartError) ExitCode() int { return e.Code }
func (e *StartError) Unwrap() error { return e.Err }

// LookPath resolves the training command's program as a start would, to an
// absolute path; a program that cannot be started is a *StartError.
func LookPath(program string) (string, error) {
	path, err := exec.LookPath(program)
	if err == nil {
		path, err = filepath.Abs(path)
	}
	if err == nil {
		return path, nil
	}
	code, what := 127, "not found"
	switch {
	case errors.Is(err, fs.ErrPermission):
		code, what = 126, "not executable (permission denied)"
	case errors.Is(err, syscall.EISDIR):
		code, what = 126, "a directory, not a program"
	case errors.Is(err, exec.ErrNotFound):
		what = "not found in PATH"
	}
	return "", &StartError{Code: code, Err: fmt.Errorf("training command %s: %s", program, what)}
}

// Config configures a Launcher.
type Config struct {
	// Command is the program and its arguments. Required.
	Command []string
	Dir     string
	// Env is the base environment; the rank variables are set over it.
	Env []string
	// Stdout and Stderr receive the processes' output, each line prefixed
	// with "[rank N] "; os.Stdout and os.Stderr if nil.
	Stdout io.Writer
	Stderr io.Writer
	// Guard is the command line that starts the process guard: the
	// coordinator binary and its argument "guard". Required.
	Guard []string
	// Logs, when set, keeps each process's output in a file of its own,
	// and says whose output still reaches Stdout and Stderr.
	Logs *Logs
	// OnFenced is called when the guard killed the processes on its own
	// because their deadline passed: the lease they ran under is over.
	OnFenced func(lease int64)
	// OnHung, if set, is told of each rank the guard found hung
	// (guard.EventHung; Rank is the process's global rank), once per rank
	// and generation, for a start whose Procs had a Watch. The launcher
	// logs it and does nothing else: stopping (StopStacks) is the caller's
	// decision. OnProgress, if set, is told how far the ranks are
	// (guard.EventProgress), about once a second while they step. Both are
	// called on the goroutine that reads the guard's reports, which waits
	// for them: they must not block, nor call the launcher.
	OnHung     func(guard.Report)
	OnProgress func(guard.Report)
	// OnGuard, if set, is told of each guard started, before anything is
	// started under it: a successor of this sidecar needs it to find what
	// the guard ran (Reclaim). An error refuses the guard, which is closed
	// unused.
	OnGuard func(GuardInfo) error
	// Preload, for a command whose program is a Python interpreter, has
	// the guard keep one warm interpreter per process that has imported
	// these modules, which the next start becomes instead of starting
	// cold. For any other command it is logged once and ignored.
	Preload []string
	// InPlace says the command trains in place (elastic.run): the guard
	// keeps a started spare per slot while the node runs nothing, and a
	// slot is cold until it holds a parked trainer.
	InPlace bool
	Logger  hclog.Logger
}

// Launcher runs one generation of a node's processes at a time.
type Launcher struct {
	cfg    Config
	logger hclog.Logger

	mu      sync.Mutex
	guard   *guardProc // nil until first needed, and after it died
	lease   int64
	fenceAt time.Time
	current *group
	closed  bool
	// page carries the deadline to the processes' fence watchdogs, past
	// the guard; nil until the first guard starts, and where the kernel
	// has no memfd (no watchdogs then: the guard alone fences).
	page       *guard.DeadlinePage
	pageFailed bool
	// warmChanged is closed and replaced whenever a warm slot of the guard
	// settles or starts over.
	warmChanged chan struct{}

	// replaced is set when a guard that died was replaced (replaceGuard),
	// and cleared by the next start.
	replaced bool

	// sweeping is held while a dead guard's leftovers are swept: no new
	// guard starts (and so no generation) before they are gone, and the
	// sweep never takes a guard that is starting for one of them.
	sweeping sync.Mutex
}

// New validates cfg. The guard starts with the first deadline or start.
func New(cfg Config) (*Launcher, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("launcher: no command to run")
	}
	if len(cfg.Guard) == 0 {
		return nil, errors.New("launcher: no process guard command")
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.OnFenced == nil {
		cfg.OnFenced = func(int64) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	for _, m := range cfg.Preload {
		if !guard.ValidModule(m) {
			return nil, fmt.Errorf("launcher: preload %q: not a Python module name", m)
		}
	}
	l := &Launcher{cfg: cfg, logger: cfg.Logger.Named("launcher"), warmChanged: make(chan struct{})}
	if len(cfg.Preload) > 0 {
		if _, err := guard.ParsePython(cfg.Command); err != nil {
			l.logger.Warn("--preload does not apply: the training command is not a Python interpreter running a script, -m or -c; it starts cold",
				"program", cfg.Command[0])
			l.cfg.Preload = nil
		}
	}
	return l, nil
}

// group is the processes of one Start.
type group struct {
	mu        sync.Mutex
	ranks     map[int]int // pid -> local rank's global rank
	pids      []int
	began     []string // by local rank, how each began (guard.Report.Began)
	remaining int
	first     *Exit // the first failure
	stopping  bool
	exit      chan Exit
	// recorded is closed once Start has recorded the pids, or failed: an
	// exit report, which may follow the start's answer at once, and the
	// guard's death wait for it.
	recorded chan struct{}
}

// Start runs one process per entry of p.Env under the guard, for the lease
// they run under, which must be the one of the last deadline. The channel
// receives one Exit when every process exited 0, or when one failed and the
// others were stopped; then it closes.
func (l *Launcher) Start(p Procs, lease int64) (<-chan Exit, error) {
	if len(p.Env) == 0 {
		return nil, errors.New("launcher: no processes to start")
	}
	path, err := LookPath(l.cfg.Command[0])
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.replaced = false
	g, err := l.guardLocked()
	if err != nil {
		l.mu.Unlock()
		return nil, err
	}
	if err := l.warmLocked(g, path, len(p.Env)); err != nil {
		l.mu.Unlock()
		return nil, err
	}
	cmd := guard.Command{Op: guard.OpStart, Lease: lease, Generation: max(p.Generation, 1), Watch: p.Watch}
	for local, env := range p.Env {
		prefix := fmt.Sprintf("[rank %d] ", p.GlobalRankBase+local)
		if p.Role != "" && p.Role != "worker" {
			prefix = fmt.Sprintf("[%s %d] ", p.Role, p.NodeRank)
		}
		log, quiet := l.cfg.Logs.proc(p, local)
		cmd.Procs = append(cmd.Procs, guard.Proc{
			Rank: p.GlobalRankBase + local, Path: path, Argv: l.cfg.Command, Dir: l.cfg.Dir,
			Env: mergeEnv(l.cfg.Env, env), Prefix: prefix, Log: log, Quiet: quiet,
		})
	}
	grp := &group{ranks: map[int]int{}, exit: make(chan Exit, 1), recorded: make(chan struct{})}
	defer close(grp.recorded)
	l.current = grp
	// Sent under the lock, so that a stop or a kill that follows reaches
	// the guard after it; the answer is awaited without the lock: the fence
	// (Kill) and the renewals (SetDeadline) must never wait for a guard that
	// does not answer, which may have forked the processes already.
	answer := make(chan guard.Report, 1)
	_, err = g.send(cmd, answer)
	l.mu.Unlock()
	var rep guard.Report
	if err == nil {
		rep, err = g.await(answer, 30*time.Second)
	}
	if err == nil && rep.Event == guard.EventStartFailed {
		err = errors.New(rep.Error)
		if rep.Code != 0 {
			err = &StartError{Code: rep.Code, Err: err}
		}
	}
	if err != nil {
		l.mu.Lock()
		if l.current == grp {
			l.current = nil
		}
		l.mu.Unlock()
		return nil, err
	}
	grp.mu.Lock()
	for i, pid := range rep.Pids {
		grp.ranks[pid] = cmd.Procs[i].Rank
	}
	grp.pids, grp.remaining, grp.began = rep.Pids, len(rep.Pids), rep.Began
	exit := grp.exit
	grp.mu.Unlock()
	l.mu.Lock()
	if l.guard == g && rep.Warm > 0 {
		// Slots started cold or in place left their warm interpreters
		// idle: only a start that used one makes the node cold.
		l.warmGoneLocked(g, len(p.Env))
	}
	l.mu.Unlock()
	l.logger.Debug("started", "generation", p.Generation, "processes", len(rep.Pids), "warm", rep.Warm, "inPlace", rep.InPlace)
	return exit, nil
}

// onParked records which slots hold a parked trainer (a rank that left its
// generation in place, or a started spare whose start-up is done), which
// makes the node's next start cold or not.
func (l *Launcher) onParked(g *guardProc, rep guard.Report) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.parked == nil {
		g.parked = map[int]bool{}
	}
	switch rep.Event {
	case guard.EventParked:
		g.parked[rep.Slot] = true
		if rep.Generation > 0 {
			l.logger.Info("a rank left its generation in place", "rank", rep.Rank, "generation", rep.Generation, "pid", rep.Pid)
		} else {
			l.logger.Info("a started spare is ready", "slot", rep.Slot, "pid", rep.Pid)
		}
	case guard.EventUnparked:
		delete(g.parked, rep.Slot)
	case guard.EventSpareLost:
		delete(g.parked, rep.Slot)
		l.logger.Warn("a started spare exited before it reached elastic.run; this slot starts its trainer when given a rank",
			"slot", rep.Slot, "pid", rep.Pid, "code", rep.Code)
	}
	l.warmNoticeLocked()
}

// onWatch hands on what the guard found of the ranks' progress.
func (l *Launcher) onWatch(rep guard.Report) {
	switch rep.Event {
	case guard.EventHung:
		l.logger.Info("a rank hangs", "rank", rep.Rank, "generation", rep.Generation, "step", rep.Step,
			"quiet", time.Duration(rep.QuietNanos), "timeout", time.Duration(rep.TimeoutNanos), "stopped", rep.Stopped)
		if l.cfg.OnHung != nil {
			l.cfg.OnHung(rep)
		}
	case guard.EventProgress:
		if l.cfg.OnProgress != nil {
			l.cfg.OnProgress(rep)
		}
	}
}

// onExit records a process's exit; the first failure stops the others.
func (l *Launcher) onExit(rep guard.Report) {
	l.mu.Lock()
	grp := l.current
	l.mu.Unlock()
	if grp == nil {
		return
	}
	<-grp.recorded
	grp.mu.Lock()
	rank, ok := grp.ranks[rep.Pid]
	if !ok {
		grp.mu.Unlock()
		return
	}
	delete(grp.ranks, rep.Pid)
	grp.remaining--
	stopOthers := false
	if rep.Code != 0 && grp.first == nil {
		msg := fmt.Sprintf("exited with code %d", rep.Code)
		if rep.Signal != 0 {
			msg = "killed by signal " + signalName(rep.Signal)
		}
		grp.first = &Exit{Code: rep.Code, Message: fmt.Sprintf("rank %d: %s", rank, msg)}
		stopOthers = !grp.stopping && grp.remaining > 0
		grp.stopping = true
		if stopOthers {
			l.logger.Info("a process failed; stopping the others", "rank", rank, "exit_code", rep.Code)
		}
	}
	l.finishLocked(grp)
	grp.mu.Unlock()
	if stopOthers {
		go func() { _ = l.Stop(context.Background(), DefaultGrace) }()
	}
}

// finishLocked delivers the group's exit once every process exited.
func (l *Launcher) finishLocked(grp *group) {
	if grp.remaining > 0 || grp.exit == nil {
		return
	}
	if grp.first != nil {
		grp.exit <- *grp.first
	} else {
		grp.exit <- Exit{Code: 0, Message: "every process exited 0"}
	}
	close(grp.exit)
	grp.exit = nil
}

// SetDeadline tells the guard the lease the processes run under and the
// time by which they must be dead unless it is extended again. The
// processes' watchdogs learn it first, from the deadline page, so that a
// guard that does not read its socket holds back no renewal.
func (l *Launcher) SetDeadline(lease int64, at time.Time) error {
	killAt := monoAt(at)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lease, l.fenceAt = lease, at
	if l.page != nil {
		l.page.Set(lease, killAt)
	}
	if l.guard == nil {
		return nil // given to the guard when it starts
	}
	_, err := l.guard.send(deadlineCommand(lease, killAt), nil)
	return err
}

// monoAt is at on the CLOCK_MONOTONIC clock of guard.MonoNow.
func monoAt(at time.Time) int64 { return guard.MonoNow() + int64(time.Until(at)) }

func deadlineCommand(lease, killAt int64) guard.Command {
	return guard.Command{Op: guard.OpDeadline, Lease: lease, KillAt: killAt}
}

// Stop stops the running processes: SIGTERM to each process group, up to
// grace for them to exit, then SIGKILL of whatever is left of their trees.
// It returns when nothing is left, or kills at once when ctx is done first.
// Stopping nothing is not an error; Stop is safe to call twice and
// alongside Kill. In a generation started with a Watch, a process that is
// blocked (it reports progress, and has shown no sign of life for a while)
// writes its Python stack and is killed at once: SIGTERM would not reach
// it.
func (l *Launcher) Stop(ctx context.Context, grace time.Duration) error {
	return l.stop(ctx, guard.Command{Op: guard.OpStop, GraceNanos: int64(grace)})
}

// StopStacks stops the running processes because of a hang: each process
// writes its Python stack (the signal its trainer registered on its
// progress page), and a moment later everything is killed, without a grace
// period. It returns as Stop does.
func (l *Launcher) StopStacks(ctx context.Context) error {
	return l.stop(ctx, guard.Command{Op: guard.OpStop, Stacks: true})
}

// stop has the guard carry out the stop c, and waits until nothing is left.
func (l *Launcher) stop(ctx context.Context, c guard.Command) error {
	g := l.stopping(false)
	if g == nil {
		return nil
	}
	seq, err := g.send(c, nil)
	if err == nil {
		err = g.awaitClear(seq, ctx.Done())
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, errGuardDied) {
		l.guardDied(g, false)
		return nil
	}
	if kerr := l.Kill(context.WithoutCancel(ctx)); kerr != nil {
		return kerr
	}
	return ctx.Err()
}

// stopping marks the current processes as being stopped, so that a failure
// among them does not stop them a second time, and returns the guard, nil
// when there is none. fence also forgets the lease: no start until the
// next deadline.
func (l *Launcher) stopping(fence bool) *guardProc {
	l.mu.Lock()
	defer l.mu.Unlock()
	if fence {
		l.lease, l.fenceAt = 0, time.Time{}
		if l.page != nil {
			l.page.Fence()
		}
		if l.guard != nil {
			l.warmGoneLocked(l.guard, l.guard.warmSlots)
		}
	}
	if grp := l.current; grp != nil {
		grp.mu.Lock()
		grp.stopping = true
		grp.mu.Unlock()
	}
	return l.guard
}

// Kill kills the running processes at once and refuses to start more until
// the next deadline: the node is fenced out. It returns when nothing is
// left; a guard that does not act in time is killed and its processes'
// remains swept, and if some of them still run after that (stuck in the
// kernel), it says so (ErrLeftRunning): the caller must not count them
// dead.
func (l *Launcher) Kill(ctx context.Context) error {
	g := l.stopping(true)
	if g == nil {
		return nil
	}
	seq, err := g.send(guard.Command{Op: guard.OpKill}, nil)
	if err == nil {
		timeout, cancel := context.WithTimeout(ctx, killTimeout)
		err = g.awaitClear(seq, timeout.Done())
		cancel()
	}
	if err != nil {
		l.logger.Warn("the process guard did not kill in time; killing it", "error", err)
		g.kill()
		l.killKnown(g)
		<-g.dead
		l.guardDied(g, false)
		needle := []byte(guard.EnvGuardID + "=" + g.marker + "\x00")
		if len(marked(needle)) > 0 || populated(g.cgroupPath()) {
			return fmt.Errorf("%w: some of guard %s's processes outlived their sweep", ErrLeftRunning, g.marker)
		}
	}
	return nil
}

// killKnown kills the guard's cgroup and the process groups of the
// processes it started, without waiting for the guard to die: a guard
// stuck in the kernel (a rename on a stalled file system) dies only when
// the call returns, and its processes take Pdeathsig only then.
func (l *Launcher) killKnown(g *guardProc) {
	_ = guard.KillCgroup(g.cgroupPath())
	l.mu.Lock()
	grp := l.current
	l.mu.Unlock()
	if grp == nil {
		return
	}
	grp.mu.Lock()
	defer grp.mu.Unlock()
	for pid := range grp.ranks { // not reported exited, so not reused
		_ = syscall.Kill(-pid, syscall.SIGKILL) // each leads its process group
	}
}

// Close stops everything and the guard with it. The launcher cannot be
// used afterwards.
func (l *Launcher) Close() {
	l.mu.Lock()
	g := l.guard
	l.closed = true
	if l.page != nil {
		// Every process dies with the guard; the watchdogs keep their own
		// mappings of the page, which says so.
		l.page.Fence()
		l.page.Close()
		l.page = nil
	}
	l.mu.Unlock()
	if g == nil {
		return
	}
	g.close()
	select {
	case <-g.dead:
	case <-time.After(guardTimeout + DefaultGrace):
		g.kill()
		<-g.dead
	}
	l.guardDied(g, false)
}

// Began says, by local rank, how the current generation's processes
// began it (guard.Report.Began: in place, a started spare, or cold and
// why); nil unless the command trains in place.
func (l *Launcher) Began() []string {
	grp := l.currentGroup()
	if grp == nil {
		return nil
	}
	grp.mu.Lock()
	defer grp.mu.Unlock()
	return slices.Clone(grp.began)
}

// currentGroup is the current generation's processes, nil between
// generations.
func (l *Launcher) currentGroup() *group {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current
}

// Pids returns the process ids of the running processes, for tests and
// diagnostics.
func (l *Launcher) Pids() []int {
	grp := l.currentGroup()
	if grp == nil {
		return nil
	}
	grp.mu.Lock()
	defer grp.mu.Unlock()
	var out []int
	for _, pid := range grp.pids {
		if _, running := grp.ranks[pid]; running {
			out = append(out, pid)
		}
	}
	return out
}

// guardLocked returns the running guard, starting one if there is none.
func (l *Launcher) guardLocked() (*guardProc, error) {
	if l.closed {
		return nil, errors.New("launcher: closed")
	}
	if l.guard != nil {
		return l.guard, nil
	}
	l.sweeping.Lock()
	defer l.sweeping.Unlock()
	var g *guardProc
	hooks := guardHooks{exit: l.onExit, fenced: func(lease int64) {
		l.logger.Warn("the lease deadline passed: the guard killed the processes", "lease", fmt.Sprintf("%x", lease))
		l.cfg.OnFenced(lease)
	}, warm: l.onWarm, watch: l.onWatch, parked: l.onParked}
	if l.page == nil && !l.pageFailed {
		page, err := guard.NewDeadlinePage()
		if err != nil {
			l.pageFailed = true
			l.logger.Warn("no fence watchdogs: the guard alone holds the deadline", "error", err)
		} else {
			l.page = page
			if l.lease != 0 {
				page.Set(l.lease, monoAt(l.fenceAt))
			}
		}
	}
	g, err := startGuard(l.cfg.Guard, l.cfg.Env, l.cfg.Stdout, l.cfg.Stderr, l.page, hooks)
	if err != nil {
		return nil, err
	}
	if l.cfg.OnGuard != nil {
		if err := l.cfg.OnGuard(g.info()); err != nil {
			g.close()
			<-g.dead
			Sweep(g.marker, g.cgroupPath())
			return nil, fmt.Errorf("launcher: process guard refused: %w", err)
		}
	}
	if l.lease != 0 {
		if _, err := g.send(deadlineCommand(l.lease, monoAt(l.fenceAt)), nil); err != nil {
			g.close()
			return nil, err
		}
	}
	l.guard = g
	go func() {
		<-g.dead
		l.guardDied(g, true)
	}()
	return g, nil
}

// guardDied forgets a guard that exited, ends the processes it ran, and
// sweeps whatever of their trees it left behind. With replace, a guard
// that died by itself is replaced once the sweep is done, before its
// processes' end is told (replaceGuard).
func (l *Launcher) guardDied(g *guardProc, replace bool) {
	l.mu.Lock()
	if l.guard == g {
		l.guard = nil
		l.warmNoticeLocked() // its warm interpreters died with it
	}
	grp := l.current
	l.mu.Unlock()
	l.sweeping.Lock()
	Sweep(g.marker, g.cgroupPath())
	l.sweeping.Unlock()
	if replace {
		l.replaceGuard(g)
	}
	if grp == nil {
		return
	}
	<-grp.recorded
	grp.mu.Lock()
	defer grp.mu.Unlock()
	if len(grp.ranks) == 0 {
		return
	}
	if grp.first == nil {
		grp.first = &Exit{Code: 137, Message: "the process guard died"}
	}
	clear(grp.ranks)
	grp.remaining = 0
	l.finishLocked(grp)
}

func newMarker() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
