package main

import (
	"flag"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/bench/internal/stats"
)

// The goodput suite (-suite goodput): one job a configuration, trained
// fault-free for a while to measure its step rate, then for a long
// stretch with a fault at the start of every window in turn; each
// window's progress, from the step logs, against that rate, and the job's
// own account (`coordinator status -o json`, "goodput") of the same time.

// Faults of the goodput suite, in the order they are made.
const (
	// faultKillRank is a SIGKILL of one trainer.
	faultKillRank = "kill-rank"
	// faultHang is a SIGSTOP of one trainer, never continued: the system
	// must end it.
	faultHang = "hang"
	// faultKillNode is a SIGKILL of a node's sidecar and everything under
	// it; torchrun: an agent and its worker, and another agent started.
	faultKillNode = "kill-node"
	// faultFreeze is a SIGSTOP of a node's sidecar and everything under
	// it, continued after the thaw time; torchrun: an agent and its worker.
	faultFreeze = "freeze"
	// faultScaleUp is `coordinator scale --np N+1`; torchrun: one more
	// agent, which --nnodes N:N+1 lets join.
	faultScaleUp = "scale-up"
	// faultScaleDown is `coordinator scale --np N`; torchrun: SIGTERM to
	// an agent.
	faultScaleDown = "scale-down"
)

var goodputFaults = []string{faultKillRank, faultHang, faultKillNode, faultFreeze, faultScaleUp, faultScaleDown}

// goodputConfig is what the goodput suite adds to config.
type goodputConfig struct {
	// duration is how long the faults run; a fault starts each window of
	// every, the faults in turn.
	duration time.Duration
	every    time.Duration
	faults   []string
	// calibrate is the fault-free stretch before the faults that gives
	// the job's step rate.
	calibrate time.Duration
	// thaw is how long a frozen node stays frozen.
	thaw time.Duration
}

// registerGoodputFlags adds the goodput suite's flags to fs; the returned
// function reads them once fs is parsed.
func registerGoodputFlags(fs *flag.FlagSet) func() (goodputConfig, error) {
	var g goodputConfig
	fs.DurationVar(&g.duration, "duration", 10*time.Minute, "goodput suite: how long each job runs with faults, after its calibration")
	fs.DurationVar(&g.every, "every", 30*time.Second, "goodput suite: a fault at the start of every window this long")
	fs.DurationVar(&g.calibrate, "calibrate", time.Minute, "goodput suite: the fault-free stretch before the faults that measures the job's step rate")
	fs.DurationVar(&g.thaw, "thaw", 10*time.Second, "goodput suite: how long a frozen node stays frozen")
	faults := fs.String("faults", strings.Join(goodputFaults, ","), "goodput suite: the faults, made in this order, again and again")
	return func() (goodputConfig, error) {
		for _, f := range strings.Split(*faults, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			known := false
			for _, k := range goodputFaults {
				known = known || k == f
			}
			if !known {
				return g, fmt.Errorf("-faults: unknown fault %q: want %s", f, strings.Join(goodputFaults, ", "))
			}
			g.faults = append(g.faults, f)
		}
		switch {
		case len(g.faults) == 0:
			return g, fmt.Errorf("-faults: name at least one")
		case g.every <= 0 || g.duration < g.every:
			return g, fmt.Errorf("-every must be positive and -duration at least as long")
		case g.calibrate < 5*time.Second:
			return g, fmt.Errorf("-calibrate must be 5s or more")
		case g.thaw <= 0 || g.thaw >= g.every:
			return g, fmt.Errorf("-thaw must be positive and shorter than -every")
		}
		return g, nil
	}
}

// goodputArgs are run's flags for the goodput suite: restarts without
// end, for failures and hangs, and a shorter grace period than the default.
var goodputArgs = append([]string{"--max-hang-restarts", "1000000"}, recoveryArgs...)

// torchrunEvery is how often torchrun's trainer saves to disk in the
// goodput suite.
const torchrunEvery = "10"

// goodputJob is a started job the suite faults: coordinator run's or
// torchrun's.
type goodputJob interface {
	stepLogs() *session
	// inject makes a fault of kind, aimed at rank i % np, and returns its
	// time and, for a fault undone later (a freeze), what undoes it.
	inject(kind string, i int) (at time.Time, undo func(), err error)
	// account is the job's own account now; nil when it keeps none.
	account() (*account, error)
	stop()
}

var (
	_ goodputJob = (*coordinatorJob)(nil)
	_ goodputJob = (*torchrunJob)(nil)
)

// goodputRun is one job of the suite: a size and a configuration.
type goodputRun struct {
	np     int
	config string // a mode's name, or "torchrun"
	// rate is the fault-free step rate, steps a second; stepTime the
	// median step interval of the same stretch.
	rate     float64
	stepTime time.Duration
	windows  []window
	// job is the job's own account over all the windows; jobNote says
	// why there is none.
	job     *account
	jobNote string
	note    string
}

// measureGoodput runs every configuration at every size and returns the
// report, but for its header's date, time taken and load.
func measureGoodput(cfg *config, g goodputConfig, sizes []int, wanted []mode, torchrun bool, missing map[string]bool) goodputReport {
	rep := goodputReport{cfg: g}
	rep.version, _ = output(cfg.coordinator, "version")
	for _, np := range sizes {
		for _, m := range wanted {
			run := goodputRun{np: np, config: m.name}
			if why := unavailable(m, missing); why != "" {
				run.note = "not available on this build: " + why
			} else {
				progress("np %d, %s: %s fault-free, then a fault every %s for %s", np, m.name, g.calibrate, g.every, g.duration)
				j, err := startCoordinator(cfg, np, m, 0, extras{runArgs: goodputArgs})
				if err != nil {
					run.note = failed(err)
				} else {
					runGoodput(g, j, &run)
					j.stop()
				}
			}
			rep.runs = append(rep.runs, run)
		}
		if torchrun {
			run := goodputRun{np: np, config: "torchrun", jobNote: "none"}
			progress("np %d, torchrun: %s fault-free, then a fault every %s for %s", np, g.calibrate, g.every, g.duration)
			j, err := startTorchrun(cfg, np, 0, np+1, []string{"--every", torchrunEvery})
			if err != nil {
				run.note = failed(err)
			} else {
				runGoodput(g, j, &run)
				j.stop()
			}
			rep.runs = append(rep.runs, run)
		}
	}
	return rep
}

func failed(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	progress("%s", line)
	return "failed: " + line
}

// runGoodput measures one started job: its step rate over g.calibrate,
// then a fault at the start of every window for g.duration.
func runGoodput(g goodputConfig, job goodputJob, run *goodputRun) {
	s := job.stepLogs()
	from := time.Now()
	if err := follow(s, from.Add(g.calibrate)); err != nil {
		run.note = failed(err)
		return
	}
	to := time.Now()
	procs := s.logs.list()
	run.rate, run.stepTime = stepRate(procs, from, to), median(intervals(procs, from, to))
	if run.rate <= 0 {
		run.note = fmt.Sprintf("failed: no steps in the %s of calibration", g.calibrate)
		return
	}
	n := int(g.duration / g.every)
	begun := time.Now()
	snapshots := make([]*account, 0, n+1)
	snapshot := func() {
		a, err := job.account()
		if err != nil {
			progress("np %d, %s: %v", run.np, run.config, err)
		}
		snapshots = append(snapshots, a)
	}
	for k := range n {
		if err := follow(s, begun.Add(time.Duration(k)*g.every)); err != nil {
			run.note = failed(err)
			return
		}
		snapshot()
		w := window{kind: g.faults[k%len(g.faults)], victim: k/len(g.faults) + 1, start: time.Now()}
		if k > 0 {
			run.windows[k-1].end = w.start
		}
		at, undo, err := job.inject(w.kind, w.victim)
		w.fault = at
		if err != nil {
			w.err = err.Error()
			progress("np %d, %s: fault %d (%s): %v", run.np, run.config, k+1, w.kind, err)
		}
		run.windows = append(run.windows, w)
		if undo != nil {
			if err := follow(s, at.Add(g.thaw)); err != nil {
				undo()
				run.note = failed(err)
				return
			}
			undo()
		}
	}
	if err := follow(s, begun.Add(time.Duration(n)*g.every)); err != nil {
		run.note = failed(err)
		return
	}
	snapshot()
	run.windows[n-1].end = time.Now()
	// The logs are read to the end: the last lines' steps were done by
	// the last window's end.
	if err := s.logs.poll(); err != nil {
		run.note = failed(err)
		return
	}
	measureWindows(s.logs.list(), run.windows, run.rate)
	for k := range run.windows {
		run.windows[k].job = snapshots[k+1].since(snapshots[k])
	}
	run.job = snapshots[n].since(snapshots[0])
	if run.job == nil && run.jobNote == "" {
		run.jobNote = "n/a"
	}
}

// follow reads the step logs about every second until until.
func follow(s *session, until time.Time) error {
	for {
		if err := s.logs.poll(); err != nil {
			return err
		}
		left := time.Until(until)
		if left <= 0 {
			return nil
		}
		time.Sleep(min(left, time.Second))
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return stats.Median(d)
}

// freeze stops root and everything under it (root first, so that it
// starts nothing more), and returns what continues them.
func freeze(root int) (time.Time, func(), error) {
	pids := tree(root)
	at := time.Now()
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && err != syscall.ESRCH {
			return at, nil, fmt.Errorf("stop %d: %w", pid, err)
		}
	}
	// A process forked before its parent stopped.
	for _, pid := range tree(root) {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		pids = append(pids, pid)
	}
	return at, func() {
		for _, pid := range append(tree(root), pids...) {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}, nil
}

// stopTrainer makes a trainer hang: a SIGSTOP, never continued.
func stopTrainer(pid int) (time.Time, func(), error) {
	at := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return at, nil, fmt.Errorf("stop trainer %d: %w", pid, err)
	}
	return at, nil, nil
}

func (j *coordinatorJob) inject(kind string, i int) (time.Time, func(), error) {
	noUndo := func(at time.Time, _ int, err error) (time.Time, func(), error) { return at, nil, err }
	switch kind {
	case faultKillRank:
		return noUndo(j.killRank(i))
	case faultHang:
		pid, err := j.victim(i)
		if err != nil {
			return time.Now(), nil, err
		}
		return stopTrainer(pid)
	case faultKillNode:
		return noUndo(j.killNode(i))
	case faultFreeze:
		pid, err := j.victim(i)
		if err != nil {
			return time.Now(), nil, err
		}
		sidecar := childOf(pid, j.cmd.Process.Pid)
		if sidecar == 0 {
			return time.Now(), nil, fmt.Errorf("trainer %d is not under coordinator run", pid)
		}
		return freeze(sidecar)
	case faultScaleUp:
		return noUndo(j.scale(j.np + 1))
	case faultScaleDown:
		return noUndo(j.scale(j.np))
	}
	return time.Now(), nil, fmt.Errorf("unknown fault %q", kind)
}

// account reads the job's own account from `coordinator status -o json`.
func (j *coordinatorJob) account() (*account, error) {
	out, err := j.statusJSON()
	if err != nil {
		return nil, err
	}
	return parseAccount(out)
}

func (j *torchrunJob) inject(kind string, i int) (time.Time, func(), error) {
	switch kind {
	case faultKillRank:
		at, _, err := j.killRank(i)
		return at, nil, err
	case faultHang:
		pid, err := j.victim(i % j.np)
		if err != nil {
			return time.Now(), nil, err
		}
		return stopTrainer(pid)
	case faultKillNode:
		at, _, err := j.killAgent(i)
		return at, nil, err
	case faultFreeze:
		agent, err := j.agentFor(i)
		if err != nil {
			return time.Now(), nil, err
		}
		return freeze(agent)
	case faultScaleUp:
		at := time.Now()
		return at, nil, j.startAgent()
	case faultScaleDown:
		return j.stopAgent()
	}
	return time.Now(), nil, fmt.Errorf("unknown fault %q", kind)
}

// account is nil: torchrun keeps none.
func (j *torchrunJob) account() (*account, error) { return nil, nil }
