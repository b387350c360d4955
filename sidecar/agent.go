package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// Workload is what an agent supervises: the training processes of one node.
// It is declared here, by its consumer; the launcher implements it.
type Workload interface {
	// Start starts the processes of an assignment. The channel receives one
	// Exit when they have all exited, or when the first one failed and the
	// others were stopped.
	Start(ctx context.Context, a Assignment) (<-chan Exit, error)
	// Stop stops what Start started, waiting up to grace for the processes
	// to exit before killing them, and returns when none is left. Stopping
	// nothing is not an error.
	Stop(ctx context.Context, grace time.Duration) error
	// Kill kills at once and refuses to start anything until the next
	// deadline: the node lost its lease. It returns when nothing is left,
	// and may be called while Stop runs.
	Kill(ctx context.Context) error
	// SetDeadline says which lease the processes run under and by when they
	// must be dead unless the deadline is extended again. Start refuses an
	// assignment made for another lease.
	SetDeadline(lease int64, at time.Time)
	// Pids are the running processes' ids in local rank order (one that
	// exited is left out), which the node's record shows while they run
	// (status's PIDS); none where the workload has no processes of its
	// own.
	Pids() []int
}

// Assignment is one node's part in a generation.
type Assignment struct {
	Job    string
	Plan   membership.Plan
	Member membership.Member
}

// Exit is how a workload ended: Code 0 is success; a process killed by a
// signal has 128+signal.
type Exit struct {
	Code    int
	Message string
}

// Result is how the job ended for this node.
type Result struct {
	Phase    membership.JobPhase
	ExitCode int
	Message  string
}

// ErrLeft is returned by Run when the node left the job before it ended.
var ErrLeft = errors.New("sidecar: node left the job")

// ErrWaitTimeout is returned by Run when the node waited longer than
// Config.WaitTimeout without running.
var ErrWaitTimeout = errors.New("sidecar: waited too long for the job to run this node")

// Config configures an Agent.
type Config struct {
	// Place is the node's: its record (whose state the agent manages),
	// its job, the etcd it registers in, its lease's TTL and fence margin.
	presence.Place
	// Spec, if set, is stored as the job's spec unless it has one.
	Spec     *membership.Spec
	Workload Workload
	// StopGrace is how long processes get to exit after SIGTERM; 10 s if zero.
	StopGrace time.Duration
	// WaitTimeout, if set, is how long the node may wait without running
	// before Run gives up with ErrWaitTimeout.
	WaitTimeout time.Duration
	// Tables, if set, shares decoded rank tables between the agents of a
	// process (simulated nodes); a sidecar needs none.
	Tables *membership.TableCache
	// OnLease, if set, is told of the node's lease each time it is granted
	// or renewed (a successor on the machine may revoke it: package
	// handover). It must not block.
	OnLease func(lease int64)
	// Observer, if set, is told what the agent does (for metrics).
	Observer Observer
	// BeforeLeave, if set, runs when the node leaves the job (it ended, or
	// the sidecar was told to stop), once the workload has stopped and
	// before the lease is revoked: the last moment the node still acts for
	// the job, as the in-memory checkpoint's last write to disk needs.
	BeforeLeave func(ctx context.Context)
	// Notes, if set, hears a line for a person reading the trainers'
	// output: that another node's fault stopped the generation, so that a
	// rank's error as it stopped is that fault seen from there (a peer's
	// loss reads as gloo's "Connection reset by peer" traceback).
	Notes  io.Writer
	Logger hclog.Logger
}

// Observer is told what an agent does. Its methods must not block.
type Observer interface {
	// Renewal: a lease renewal took latency to answer, or failed.
	Renewal(latency time.Duration, err error)
	// Fenced: the lease was lost and the workload killed.
	Fenced()
	// Started: the workload started for a generation.
	Started(generation int64)
	// Exited: the workload exited on its own with code.
	Exited(code int)
	// StepTime: a rank's recent step intervals have median d.
	StepTime(rank int, d time.Duration)
	// Hung: one of the node's ranks hung.
	Hung()
}

// noObserver is the Observer of an agent that has none.
type noObserver struct{}

func (noObserver) Renewal(time.Duration, error) {}
func (noObserver) Fenced()                      {}
func (noObserver) Started(int64)                {}
func (noObserver) Exited(int)                   {}
func (noObserver) StepTime(int, time.Duration)  {}
func (noObserver) Hung()                        {}

// Agent follows one job's plans for one node.
type Agent struct {
	cfg    Config
	logger hclog.Logger

	abandon chan struct{}
	once    sync.Once
	current atomic.Pointer[presence.Registration]
	// unsure is set once a kill or stop of the workload failed: its
	// processes are not known dead, and no lost lease's stop is recorded.
	unsure atomic.Bool
	// running is what Fence checks: the generation whose processes run
	// and the lease they run under; zero when none runs.
	runningNow atomic.Pointer[runningGen]

	// Owned by the Run goroutine.
	reg          *presence.Registration
	exits        <-chan Exit
	running      bool
	startedGen   int64 // highest generation started (or fenced out of)
	startedLease int64 // the lease the running processes were started under
	ackedStop    int64
	// startedRanks names the ranks of the processes started ("rank 1"),
	// startedInterruptions their plan's count of faults; noted is the
	// last generation noteFaultElsewhere spoke of.
	startedRanks         string
	startedInterruptions int
	noted                int64
	// startedFirstRank is the global rank of the node's first process;
	// hungGen the last generation whose hang this node reported, and
	// progressWritten when it last wrote its ranks' progress.
	startedFirstRank int
	hang             *membership.Hang
	quietUntil       time.Time
	// firstMarked is the generation whose first step the node record
	// says (StepMarks.First).
	firstMarked     int64
	progressWritten time.Time
	progressTimeout membership.Duration
}

// New validates cfg.
func New(cfg Config) (*Agent, error) {
	if cfg.Client == nil || cfg.Workload == nil {
		return nil, errors.New("sidecar: an etcd client and a workload are required")
	}
	if err := membership.ValidateJobID(cfg.Job); err != nil {
		return nil, err
	}
	if cfg.Keys == (membership.Keys{}) {
		cfg.Keys = membership.DefaultKeys()
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	if cfg.OnLease == nil {
		cfg.OnLease = func(int64) {}
	}
	cfg.Node.State, cfg.Node.Generation = membership.NodeWaiting, 0
	if err := cfg.Node.Validate(); err != nil {
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	return &Agent{
		cfg: cfg, logger: cfg.Logger.Named("sidecar").With("job", cfg.Job, "node", cfg.Node.ID),
		abandon: make(chan struct{}),
	}, nil
}

// runningGen is a generation started under a lease, with its plan.
type runningGen struct {
	generation int64
	lease      int64
	members    []membership.Member
}

// ErrFenced is returned by Fence: a process of that generation may not
// act for the job any more.
var ErrFenced = errors.New("sidecar: fenced")

// Fence says whether a process of generation may still store anything for
// the job: the generation must be the one the node runs, under the lease
// the node still holds, before its deadline. It is the rule of the guard's
// commits (guard.CommitRequest), for what the sidecar stores itself.
func (a *Agent) Fence(generation int64) error {
	reg := a.current.Load()
	if reg == nil {
		return fmt.Errorf("%w: the node is not registered", ErrFenced)
	}
	lease, deadline := reg.Deadline()
	run := a.runningNow.Load()
	switch {
	case lease == 0:
		return fmt.Errorf("%w: this node was fenced out: its lease is lost", ErrFenced)
	case run == nil:
		return fmt.Errorf("%w: generation %d is over; this node runs none", ErrFenced, generation)
	case run.generation != generation:
		return fmt.Errorf("%w: generation %d is over; this node runs generation %d", ErrFenced, generation, run.generation)
	case run.lease != int64(lease):
		return fmt.Errorf("%w: this node was fenced out: generation %d ran under a lost lease", ErrFenced, generation)
	case !time.Now().Before(deadline):
		return fmt.Errorf("%w: the lease deadline has passed", ErrFenced)
	}
	return nil
}

// Holds says whether the node still holds its lease before its deadline,
// running or not: what a write for the job on its behalf needs.
func (a *Agent) Holds() error {
	reg := a.current.Load()
	if reg == nil {
		return fmt.Errorf("%w: the node is not registered", ErrFenced)
	}
	lease, deadline := reg.Deadline()
	if lease == 0 || !time.Now().Before(deadline) {
		return fmt.Errorf("%w: this node does not hold its lease", ErrFenced)
	}
	return nil
}

// Members are the generation the node runs and its members, in rank
// order; 0 and nil while it runs none.
func (a *Agent) Members() (int64, []membership.Member) {
	if run := a.runningNow.Load(); run != nil {
		return run.generation, run.members
	}
	return 0, nil
}

// Registration is the node's registration, nil before Run registered it.
func (a *Agent) Registration() *presence.Registration { return a.current.Load() }

// LeaseFenced tells the agent that its processes were killed because the
// deadline of lease passed (the workload's guard did it): the node gives
// that lease up and registers again.
func (a *Agent) LeaseFenced(lease int64) {
	if reg := a.current.Load(); reg != nil {
		reg.GiveUp(clientv3.LeaseID(lease))
	}
}

// Abandon makes Run return as if the sidecar had crashed: the processes are
// killed and the lease is left to expire instead of being revoked.
func (a *Agent) Abandon() { a.once.Do(func() { close(a.abandon) }) }

// Run registers the node and follows the job until it ends, returning its
// result. When ctx is done first, the node leaves: its processes are
// stopped, its lease revoked, and Run returns ErrLeft.
func (a *Agent) Run(ctx context.Context) (Result, error) {
	if a.cfg.Spec != nil {
		stored, err := membership.CreateSpec(ctx, a.cfg.Client, a.cfg.Keys, a.cfg.Job, *a.cfg.Spec)
		switch {
		case errors.Is(err, membership.ErrInvalidRecord):
			// Someone else's bad write: the coordinator keeps the job's
			// last good spec, and says so; this node joins all the same.
			a.logger.Warn("the job's stored spec is malformed; joining without it", "error", err)
		case err != nil:
			return Result{}, fmt.Errorf("store job spec: %w", err)
		case stored.NP != a.cfg.Spec.NP:
			a.logger.Info("the job's spec sets another np; it wins", "np", stored.NP.String(), "flag_np", a.cfg.Spec.NP.String())
		}
	}
	// A node joins saying whether it is warm: one whose interpreters did
	// not import in time does not take a rank before a warm spare.
	place := a.cfg.Place
	place.Node.Cold, _ = a.cold()
	place.Node.Starting = a.starting(place.Node.Cold, place.Node.State)
	if w, ok := a.cfg.Workload.(InPlacer); ok {
		place.Node.InPlace = w.InPlace()
	}
	reg, err := presence.Register(ctx, presence.RegistrationConfig{
		Place:  place,
		Logger: a.cfg.Logger,
		OnDeadline: func(lease clientv3.LeaseID, at time.Time) {
			a.cfg.Workload.SetDeadline(int64(lease), at)
			a.cfg.OnLease(int64(lease))
		},
		// The fence does not go through Run's loop, which may be busy in
		// a graceful stop: the workload is killed from here, at once.
		OnRenewal: a.cfg.Observer.Renewal,
		OnLost: func() {
			a.cfg.Observer.Fenced()
			a.logger.Warn("lease lost: killing the workload")
			if err := a.cfg.Workload.Kill(context.WithoutCancel(ctx)); err != nil {
				a.unsure.Store(true)
				a.logger.Error("kill workload", "error", err)
			}
		},
		ProcessesGone: func() bool { return !a.unsure.Load() },
	})
	if err != nil {
		return Result{}, fmt.Errorf("register node: %w", err)
	}
	a.reg = reg
	a.current.Store(reg)
	a.logger.Info("registered", "lease", fmt.Sprintf("%x", reg.Lease()))

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	plans, err := presence.WatchPlan(watchCtx, a.cfg.Client, a.cfg.Keys, a.cfg.Job, a.cfg.Tables, a.cfg.Logger)
	if err != nil {
		reg.Close()
		return Result{}, err
	}
	// exit ends Run: the workload stops (with grace, or killed at once) and
	// the node leaves, revoking its lease, or is abandoned to the lease's
	// expiry. A node that leaves says so first, so that the coordinator
	// does not take its peers' failures, which its stop may cause, for
	// failures of their own.
	exit := func(grace time.Duration, revoke bool) error {
		if revoke {
			a.markLeaving(context.WithoutCancel(ctx))
		}
		a.stopWorkload(context.WithoutCancel(ctx), grace, false)
		if revoke && a.cfg.BeforeLeave != nil {
			a.cfg.BeforeLeave(context.WithoutCancel(ctx))
		}
		var err error
		if revoke {
			leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err = reg.Leave(leaveCtx)
			cancel()
		} else {
			reg.Close()
		}
		stopWatch()
		drain(plans)
		return err
	}

	waitTimer := newWaitTimer(a.cfg.WaitTimeout)
	defer waitTimer.stop()
	observations := a.observations()
	warmth := a.warmthChanged(ctx)
	for {
		waitTimer.set(!a.running)
		select {
		case <-waitTimer.c():
			_ = exit(0, true)
			return Result{}, fmt.Errorf("%w: %s", ErrWaitTimeout, a.cfg.WaitTimeout)
		case <-ctx.Done():
			if err := exit(a.cfg.StopGrace, true); err != nil {
				return Result{}, fmt.Errorf("%w; revoke: %v", ErrLeft, err)
			}
			return Result{}, ErrLeft
		case <-a.abandon:
			_ = exit(0, false)
			return Result{}, ErrLeft
		case err := <-reg.Fatal():
			_ = exit(0, false)
			return Result{}, err
		case ex := <-a.exits:
			a.childExited(ctx, ex)
		case o := <-observations:
			a.observed(ctx, o)
		case <-warmth:
			warmth = a.warmthChanged(ctx)
		case pu := <-plans:
			if pu.Err != nil {
				a.logger.Warn("plan unreadable; waiting for the coordinator", "error", pu.Err)
				continue
			}
			if pu.Plan == nil {
				continue
			}
			if res, done := a.follow(ctx, *pu.Plan); done {
				if err := exit(a.cfg.StopGrace, true); err != nil {
					a.logger.Warn("lease not revoked; it will expire", "error", err)
				}
				return res, nil
			}
		}
	}
}

// markLeaving tells the coordinator, before the processes stop, that this
// node is leaving. It is brief: a node cut off from etcd leaves anyway.
func (a *Agent) markLeaving(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := a.reg.Update(ctx, func(n *membership.Node) {
		n.State, n.Message = membership.NodeLeaving, "the sidecar is leaving"
	}); err != nil && !errors.Is(err, presence.ErrNotRegistered) {
		a.logger.Debug("leaving not recorded", "error", err)
	}
}

// follow carries out one plan. It reports done with the job's result when
// the plan is final.
func (a *Agent) follow(ctx context.Context, p membership.Plan) (Result, bool) {
	if p.Final() {
		a.stopWorkload(ctx, a.cfg.StopGrace, p.Result != membership.JobSucceeded)
		res := Result{Phase: p.Result, Message: p.Reason}
		if p.Result != membership.JobSucceeded {
			res.ExitCode = max(p.ExitCode, 1)
		}
		a.logger.Info("job ended", "result", p.Result, "reason", p.Reason)
		return res, true
	}
	switch p.Phase {
	case membership.PhaseStop:
		if a.ackedStop >= p.Generation {
			return Result{}, false
		}
		if p.Hang != nil {
			a.stopHung(ctx)
		} else {
			a.stopWorkload(ctx, a.cfg.StopGrace, a.faultStopped(p))
		}
		// Said before the ack, which lets the next generation start:
		// after what this generation's ranks printed, before the next's.
		a.noteFaultElsewhere(p)
		if a.ack(ctx, membership.NodeStopped, p.Generation, 0) {
			a.ackedStop = p.Generation
		}
	case membership.PhaseRun:
		m, ok := p.Member(a.cfg.Node.ID)
		if !ok || m.Lease != int64(a.reg.Lease()) || a.startedGen >= p.Generation {
			return Result{}, false // standby, a stale table, or already started
		}
		a.stopWorkload(ctx, a.cfg.StopGrace, a.faultStopped(p))
		// A stop phase no node had to ack may have passed unseen.
		a.noteFaultElsewhere(p)
		a.startedGen, a.startedRanks, a.startedInterruptions, a.startedFirstRank = p.Generation, ranksOf(m), p.Interruptions, m.GlobalRank
		a.progressWritten, a.progressTimeout, a.hang, a.quietUntil = time.Time{}, 0, nil, time.Time{}
		// Fence lets the processes store from their first instant.
		a.runningNow.Store(&runningGen{generation: p.Generation, lease: m.Lease, members: p.Members})
		exits, err := a.cfg.Workload.Start(ctx, Assignment{Job: a.cfg.Job, Plan: p, Member: m})
		if err != nil {
			a.runningNow.Store(nil)
		}
		if err != nil && a.reg.Lease() != clientv3.LeaseID(m.Lease) {
			a.logger.Warn("generation not started: the lease was lost meanwhile", "generation", p.Generation)
			return Result{}, false
		}
		if err != nil {
			a.logger.Error("workload did not start", "generation", p.Generation, "error", err)
			code, cannot := 127, false
			var unstartable interface{ ExitCode() int }
			if errors.As(err, &unstartable) {
				code, cannot = unstartable.ExitCode(), true
			}
			a.ackFailure(ctx, p.Generation, code, err.Error(), cannot)
			return Result{}, false
		}
		a.exits, a.running, a.startedLease = exits, true, m.Lease
		a.cfg.Observer.Started(p.Generation)
		a.logger.Info("started", "generation", p.Generation, "rank", m.Rank, "world_size", p.WorldSize)
		pids, began := a.cfg.Workload.Pids(), a.began()
		a.write(ctx, membership.NodeRunning, p.Generation, func(n *membership.Node) {
			n.State, n.Generation, n.ExitCode, n.Message, n.CannotStart, n.PIDs, n.Began = membership.NodeRunning, p.Generation, 0, "", false, pids, began
			n.Hang, n.Progress, n.QuietUntil, n.Marks = nil, nil, time.Time{}, nil
		})
	}
	return Result{}, false
}

func (a *Agent) childExited(ctx context.Context, ex Exit) {
	a.exits, a.running = nil, false
	if int64(a.reg.Lease()) != a.startedLease {
		// Killed by the fence: the lease they ran under is gone, and with
		// it any say about them.
		a.logger.Info("workload of a lost lease exited", "generation", a.startedGen, "exit_code", ex.Code)
		return
	}
	a.cfg.Observer.Exited(ex.Code)
	state := membership.NodeSucceeded
	if ex.Code != 0 {
		state = membership.NodeFailed
	}
	a.logger.Info("workload exited", "generation", a.startedGen, "exit_code", ex.Code)
	a.ackMessage(ctx, state, a.startedGen, ex.Code, ex.Message)
}

// noteFaultElsewhere says, when a fault of another node stopped the
// generation this node's processes ran in, that what they printed as they
// stopped may be that fault seen from here: a peer that dies in the middle
// of a collective makes every other rank fail with a traceback of its own
// (gloo's "Connection reset by peer"), which reads as a second fault. Its
// exit code cannot tell: such a rank is often still exiting when the
// stop's SIGTERM ends it. next is the stop's plan, or the next run's when
// the stop passed unseen; it is said once.
func (a *Agent) noteFaultElsewhere(next membership.Plan) {
	if a.cfg.Notes == nil || a.noted >= next.Generation || a.startedGen == 0 || a.startedGen != next.Generation-1 ||
		next.Interruptions <= a.startedInterruptions || names(next.Reason, a.cfg.Node.ID) {
		return
	}
	a.noted = next.Generation
	these := "this rank"
	if strings.HasPrefix(a.startedRanks, "ranks") {
		these = "these ranks"
	}
	fmt.Fprintf(a.cfg.Notes, "[%s] generation %d was stopped after %s: an error %s printed as it stopped, such as gloo's \"Connection reset by peer\", is that fault seen from here, not one of its own\n",
		a.startedRanks, a.startedGen, next.Reason, these)
}

// faultStopped reports whether plan p, which stops the generation this
// node runs, does so for a fault: one more interruption than when it
// started.
func (a *Agent) faultStopped(p membership.Plan) bool {
	return a.startedGen != 0 && p.Interruptions > a.startedInterruptions
}

// stopHung stops a generation stopped because a rank hung: each rank's
// stack goes to its log, and nothing waits for a grace period.
func (a *Agent) stopHung(ctx context.Context) {
	w, ok := a.cfg.Workload.(Watcher)
	if !ok {
		a.stopWorkload(ctx, 0, true)
		return
	}
	a.runningNow.Store(nil)
	if err := w.StopStacks(ctx); err != nil && ctx.Err() == nil {
		a.unsure.Store(true)
		a.logger.Error("stop workload", "error", err)
	}
	a.exits, a.running = nil, false
}

// stopWorkload stops the workload and returns when nothing of it is left,
// even of processes whose leader already exited.
//
// A graceful stop that no fault caused (a suspension, a change of
// membership, the node leaving) lets the processes store until they are
// gone: what they save as they stop, or a trainer's SIGTERM handler
// storing the save it was sending, is the job's state. No later
// generation can have stored meanwhile: none starts on this node before
// the stop returns, nor on any other before this node acks the stop or is
// fenced. After a fault (a member failed, was lost or hung) nothing they
// save is stored: their state may have gone on without a rank that failed.
func (a *Agent) stopWorkload(ctx context.Context, grace time.Duration, fault bool) {
	if grace <= 0 || fault {
		a.runningNow.Store(nil) // the generation is over: nothing of it stores
	}
	err := a.cfg.Workload.Stop(ctx, grace)
	a.runningNow.Store(nil)
	switch {
	case err != nil && ctx.Err() != nil:
		// The sidecar itself is told to stop meanwhile: what was left
		// is killed, as Stop does when its context ends.
		a.logger.Info("stop cut short: the sidecar is stopping; the workload was killed")
	case err != nil:
		a.unsure.Store(true)
		a.logger.Error("stop workload", "error", err)
	}
	a.exits, a.running = nil, false
}

func (a *Agent) ack(ctx context.Context, state membership.NodeState, gen int64, code int) bool {
	return a.ackMessage(ctx, state, gen, code, "")
}

// ackMessage writes the node's state, retrying transient errors; it gives up
// when the node is not registered (the fence and the new registration take
// over) or ctx is done.
// The ack says whether the node's next start would be cold: the leader
// places the next generation by it.
func (a *Agent) ackMessage(ctx context.Context, state membership.NodeState, gen int64, code int, msg string) bool {
	marks := a.stepMarks()
	cold, _ := a.cold()
	starting := a.starting(cold, state)
	return a.write(ctx, state, gen, func(n *membership.Node) {
		n.State, n.Generation, n.ExitCode, n.Message, n.CannotStart, n.PIDs, n.Began = state, gen, code, msg, false, nil, nil
		n.Hang, n.Progress, n.QuietUntil, n.Cold, n.Starting = nil, nil, time.Time{}, cold, starting
		if marks != nil {
			n.Marks = marks
		}
	})
}

// ackFailure reports a workload that did not start; cannot says that no
// restart can start it.
func (a *Agent) ackFailure(ctx context.Context, gen int64, code int, msg string, cannot bool) bool {
	cold, _ := a.cold()
	starting := a.starting(cold, membership.NodeFailed)
	return a.write(ctx, membership.NodeFailed, gen, func(n *membership.Node) {
		n.State, n.Generation, n.ExitCode, n.Message, n.CannotStart, n.PIDs, n.Began = membership.NodeFailed, gen, code, msg, cannot, nil, nil
		n.Hang, n.Progress, n.QuietUntil, n.Cold, n.Starting = nil, nil, time.Time{}, cold, starting
	})
}

// write changes the node record with set, retrying transient errors, until
// ctx is done.
func (a *Agent) write(ctx context.Context, state membership.NodeState, gen int64, set func(*membership.Node)) bool {
	retry := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(20*time.Millisecond),
		backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0))
	err := backoff.Retry(func() error {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := a.reg.Update(attemptCtx, set)
		if errors.Is(err, presence.ErrNotRegistered) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(retry, ctx))
	switch {
	case err != nil && ctx.Err() != nil:
		// The sidecar itself is stopping: the node leaves next, and its
		// record goes with it. No fault; said as the stop's other lines are.
		a.logger.Info("ack not written: the sidecar is stopping", "state", state, "generation", gen)
	case err != nil:
		a.logger.Warn("ack not written", "state", state, "generation", gen, "error", err)
	}
	return err == nil
}

// stepMarks are the step marks of the generation the node started last,
// as its ranks left them: an ack of its end or of a stop carries them.
func (a *Agent) stepMarks() *membership.StepMarks {
	m, ok := a.cfg.Workload.(Marker)
	if !ok || a.startedGen == 0 {
		return nil
	}
	return m.StepMarks(a.startedGen)
}

func drain[T any](ch <-chan T) {
	for range ch {
	}
}

// waitTimer fires when the node has not run for a whole timeout; it is
// disarmed while the node runs.
type waitTimer struct {
	timeout time.Duration
	timer   *time.Timer
	armed   bool
}

func newWaitTimer(timeout time.Duration) *waitTimer { return &waitTimer{timeout: timeout} }

// set arms the timer when waiting starts and disarms it when running starts.
func (w *waitTimer) set(waiting bool) {
	if w.timeout <= 0 || waiting == w.armed {
		return
	}
	w.armed = waiting
	if !waiting {
		w.timer.Stop()
		return
	}
	if w.timer == nil {
		w.timer = time.NewTimer(w.timeout)
	} else {
		w.timer.Reset(w.timeout)
	}
}

// c is the channel to wait on; nil (never ready) when disarmed.
func (w *waitTimer) c() <-chan time.Time {
	if !w.armed {
		return nil
	}
	return w.timer.C
}

func (w *waitTimer) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// ranksOf names a member's processes' global ranks: "rank 1", "ranks 2-3".
func ranksOf(m membership.Member) string {
	if m.NProc <= 1 {
		return fmt.Sprintf("rank %d", m.GlobalRank)
	}
	return fmt.Sprintf("ranks %d-%d", m.GlobalRank, m.GlobalRank+m.NProc-1)
}

// names reports whether text names the node id as a whole word ("node
// w-1 failed", "members w-1, w-2"), not as part of another (w-10).
func names(text, id string) bool {
	inID := func(c byte) bool {
		return c == '-' || c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	for i := 0; ; {
		j := strings.Index(text[i:], id)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(id)
		// A trailing '.' ends a sentence, not the id.
		if (start == 0 || !inID(text[start-1])) && (end == len(text) || !inID(text[end]) || text[end] == '.' && (end+1 == len(text) || text[end+1] == ' ')) {
			return true
		}
		i = start + 1
	}
}
