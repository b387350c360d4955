package sidecar

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// Watcher is a workload that watches its processes' progress (the
// launcher, through its guard): it says when a rank hung, and how the
// ranks step.
type Watcher interface {
	// Observations receives what the watch found, for the generation
	// running; it is never closed.
	Observations() <-chan Observation
	// StopStacks stops the processes because a rank hung: each writes its
	// stack to its log, then all are killed without a grace period (a
	// rank blocked in a collective cannot act on SIGTERM).
	StopStacks(ctx context.Context) error
}

// Marker is a workload that knows when its ranks first and last stepped
// in a generation: the leader accounts the job's time by it.
type Marker interface {
	// StepMarks are the marks of generation gen so far; nil when none of
	// its ranks stepped.
	StepMarks(gen int64) *membership.StepMarks
}

// Observation is what a Watcher found. Ranks are local (the index of the
// process on the node); the agent makes them global.
type Observation struct {
	Generation int64
	// Hung, if set, is a rank that made no progress for its hang timeout,
	// or was stopped.
	Hung *membership.Hang
	// Steps are the ranks' progress, about every second while they step.
	Steps []membership.RankProgress
	// QuietUntil, with Steps, is the latest end of a quiet phase one of
	// the ranks declared; zero for none.
	QuietUntil time.Time
	// Stepping, with Steps, are the ranks not hung: a rank reported hung
	// that is among them stepped again.
	Stepping []int
}

// progressWriteInterval is how often at most the node's record is
// rewritten with its slowest rank's progress: often enough that `status`
// shows a straggler, rarely enough that a thousand nodes cost etcd little.
const progressWriteInterval = 5 * time.Second

// observed handles what the workload's watch found.
func (a *Agent) observed(ctx context.Context, o Observation) {
	if !a.running || o.Generation != a.startedGen {
		return // a generation that is over
	}
	// A rank's step time is known from its second step on: until then it
	// has none to show, not one of 0s.
	for _, st := range o.Steps {
		if st.StepTime > 0 {
			a.cfg.Observer.StepTime(a.startedFirstRank+st.Rank, time.Duration(st.StepTime))
		}
	}
	if h := o.Hung; h != nil && a.hang == nil {
		h.Rank += a.startedFirstRank
		a.hang = h
		a.cfg.Observer.Hung()
		a.logger.Info("a rank hung; the coordinator stops the generation", "generation", o.Generation, "hang", h.String())
		if a.cfg.Notes != nil {
			fmt.Fprintf(a.cfg.Notes, "[rank %d] %s; reported to the coordinator\n", h.Rank, h.String())
		}
		a.write(ctx, membership.NodeRunning, o.Generation, func(n *membership.Node) {
			if n.State == membership.NodeRunning && n.Generation == o.Generation {
				n.Hang = h
			}
		})
		return
	}
	if o.Hung != nil || len(o.Steps) == 0 {
		return
	}
	a.markFirstStep(ctx, o.Generation)
	if h := a.hang; h != nil && slices.Contains(o.Stepping, h.Rank-a.startedFirstRank) {
		// It was waiting for a peer in a declared quiet phase, or was
		// slow, not hung: the report goes, and a hang may be reported
		// again.
		a.hang = nil
		a.logger.Info("a rank reported hung steps again", "generation", o.Generation, "rank", h.Rank)
		if a.cfg.Notes != nil {
			fmt.Fprintf(a.cfg.Notes, "[rank %d] rank %d steps again: its hang report is withdrawn\n", h.Rank, h.Rank)
		}
		a.write(ctx, membership.NodeRunning, o.Generation, func(n *membership.Node) {
			if n.State == membership.NodeRunning && n.Generation == o.Generation {
				n.Hang = nil
			}
		})
	}
	if !o.QuietUntil.Equal(a.quietUntil) {
		a.quietUntil = o.QuietUntil
		a.write(ctx, membership.NodeRunning, o.Generation, func(n *membership.Node) {
			if n.State == membership.NodeRunning && n.Generation == o.Generation {
				n.QuietUntil = o.QuietUntil
			}
		})
	}
	slowest := o.Steps[0]
	for _, st := range o.Steps[1:] {
		if st.StepTime > slowest.StepTime {
			slowest = st
		}
	}
	if slowest.StepTime == 0 {
		// No rank has a step time yet (the guard's first report comes
		// with the first step): written, "0s a step" and no hang timeout
		// would stand in status for progressWriteInterval.
		return
	}
	slowest.Rank += a.startedFirstRank
	// A new hang timeout (the first one learned) is written at once.
	if time.Since(a.progressWritten) < progressWriteInterval && slowest.HangTimeout == a.progressTimeout {
		return
	}
	a.progressWritten, a.progressTimeout = time.Now(), slowest.HangTimeout
	a.write(ctx, membership.NodeRunning, o.Generation, func(n *membership.Node) {
		if n.State == membership.NodeRunning && n.Generation == o.Generation {
			n.Progress = &slowest
		}
	})
}

// markFirstStep writes, once per generation, when every rank of the node
// first stepped in it: the leader ends the restart at the last node's.
func (a *Agent) markFirstStep(ctx context.Context, gen int64) {
	if a.firstMarked >= gen {
		return
	}
	m := a.stepMarks()
	if m == nil || m.First.IsZero() {
		return
	}
	a.firstMarked = gen
	a.write(ctx, membership.NodeRunning, gen, func(n *membership.Node) {
		if n.State == membership.NodeRunning && n.Generation == gen {
			n.Marks = m
		}
	})
}

// observations is the workload's channel of observations, nil (never
// ready) when it watches nothing.
func (a *Agent) observations() <-chan Observation {
	if w, ok := a.cfg.Workload.(Watcher); ok {
		return w.Observations()
	}
	return nil
}
