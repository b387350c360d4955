package autoscale

import (
	"fmt"
	"time"
)

// Settler holds back the decisions that can wait — growth, and giving up
// workers that cannot be placed — until the room they were decided from
// has stopped changing. A workload that scales down frees its nodes over
// seconds, one pod at a time, and another that scales up takes them the
// same way; a job grown into the first of the room would wait out its
// cooldown before it could take the rest, and a job shrunk to what its
// pending workers find would shrink again at every pass: a restart each
// time. Urgent decisions pass at once. The Policy stays a pure function of
// its snapshot; the Settler is the state between passes.
type Settler struct {
	settle, maxSettle time.Duration
	waiting           map[string]int // the targets held back when they last moved
	first, last       time.Time      // when they first appeared, and last moved
	seen              time.Time      // the last pass that held any back
}

// moved reports whether the targets held back moved since ref: a job came
// or went, or a target is more than a tenth (and at least one worker) away
// from where it was. Smaller moves come and go as the scheduler places
// other pods differently from the policy's simulation; waiting for them
// to stop would hold growth back for nothing.
func moved(ref, targets map[string]int) bool {
	if len(ref) != len(targets) {
		return true
	}
	for job, to := range targets {
		was, ok := ref[job]
		if !ok || abs(to-was) > max(1, was/10) {
			return true
		}
	}
	return false
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// NewSettler holds back a decision until the plan's waiting targets have
// been the same for settle, or for at most maxSettle since the first of
// them appeared: a cluster that never settles still gets its decisions.
func NewSettler(settle, maxSettle time.Duration) *Settler {
	return &Settler{settle: settle, maxSettle: max(maxSettle, settle)}
}

// Filter returns the decisions of plan to carry out now, notes in
// plan.HeldBack why the others wait, and returns when to decide again for
// them (zero if nothing waits).
func (s *Settler) Filter(plan Plan, now time.Time) ([]Decision, time.Time) {
	var act, waiting []Decision
	for _, d := range plan.Decisions {
		if d.Urgent || s.settle <= 0 {
			act = append(act, d)
		} else {
			waiting = append(waiting, d)
		}
	}
	if len(waiting) == 0 {
		// A growth that comes and goes from pass to pass (room taken
		// and given back) keeps its first sight, so that it is carried
		// out within maxSettle all the same.
		if now.Sub(s.seen) > s.settle {
			s.waiting = nil
		}
		return act, time.Time{}
	}
	s.seen = now
	targets := map[string]int{}
	for _, d := range waiting {
		targets[d.Job] = d.To
	}
	switch {
	case s.waiting == nil:
		s.first, s.last = now, now
		s.waiting = targets
	case moved(s.waiting, targets):
		s.last = now
		s.waiting = targets
	}
	due := s.last.Add(s.settle)
	if limit := s.first.Add(s.maxSettle); limit.Before(due) {
		due = limit
	}
	if !now.Before(due) {
		s.waiting = nil
		return append(act, waiting...), time.Time{}
	}
	for _, d := range waiting {
		plan.HeldBack[d.Job] = fmt.Sprintf("%d → %d waits until the room settles (%s)", d.From, d.To, due.UTC().Format("15:04:05.000"))
	}
	return act, due
}
