package sidecar

import (
	"context"

	"github.com/elastictraining/coordinator/membership"
)

// Warmer is a workload that keeps warm interpreters ready for its next
// start (the launcher, with preloads).
type Warmer interface {
	// Cold reports whether the next start would start a process cold
	// that could start warm, and a channel closed when that may have
	// changed.
	Cold() (bool, <-chan struct{})
}

// cold is whether the node's next start would be cold where it could be
// warm, and a channel closed when that may have changed; false and nil
// (never) for a workload that keeps no warm interpreters.
func (a *Agent) cold() (bool, <-chan struct{}) {
	w, ok := a.cfg.Workload.(Warmer)
	if !ok {
		return false, nil
	}
	return w.Cold()
}

// InPlacer is a workload whose trainers train in place, and whose idle
// node starts its trainer ahead (the launcher with --in-place). Began
// says, by local rank, how the running generation's processes began it
// (membership.Node.Began).
type InPlacer interface {
	InPlace() bool
	Began() []string
}

// began is how the running generation's processes began it; nil unless
// they train in place.
func (a *Agent) began() []string {
	if w, ok := a.cfg.Workload.(InPlacer); ok && w.InPlace() {
		return w.Began()
	}
	return nil
}

// starting is whether a node in state, whose next start is cold or not,
// holds no rank while its trainer is started ahead (membership.Node.Starting).
func (a *Agent) starting(cold bool, state membership.NodeState) bool {
	w, ok := a.cfg.Workload.(InPlacer)
	return ok && w.InPlace() && cold && state != membership.NodeRunning
}

// warmthChanged writes the node's warmth (membership.Node.Cold) when it
// changed while the node runs nothing: a spare or a stopped member whose
// guard died, or whose interpreters are ready again, which the leader
// reads when it places the next generation. While the node runs, its used
// interpreters are being replaced, and nobody reads it: that would cost
// two writes a generation for nothing, and the acks of the generation's
// end and of its stop carry it anyway. It returns the channel to wait on
// next.
func (a *Agent) warmthChanged(ctx context.Context) <-chan struct{} {
	cold, changed := a.cold()
	rec := a.reg.Record()
	starting := a.starting(cold, rec.State)
	if a.running || rec.Cold == cold && rec.Starting == starting {
		return changed
	}
	a.write(ctx, rec.State, rec.Generation, func(n *membership.Node) { n.Cold, n.Starting = cold, starting })
	return changed
}
