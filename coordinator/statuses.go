package coordinator

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/membership"
)

// finish commits the last plan of a job: every sidecar stops and exits.
func finish(v view, now time.Time, result membership.JobPhase, exitCode int, reason string) decision {
	next := membership.Plan{Generation: 1, Phase: membership.PhaseStop, Result: result, ExitCode: exitCode,
		Reason: reason, DetectedAt: now, StopAt: now}
	if v.plan != nil {
		next.Generation = v.plan.Generation + 1
		next.Members, next.Table, next.Restarts, next.Interruptions = v.plan.Members, v.plan.Table, v.plan.Restarts, v.plan.Interruptions
		next.HangRestarts, next.MaxHangRestarts = v.plan.HangRestarts, v.plan.MaxHangRestarts
	} else if v.status != nil {
		next.Generation = v.status.Generation + 1
	}
	ran := lastRan(v)
	d := decision{plan: &next}
	d.status = finalStatus(v, next, ran)
	d.events = []membership.Event{{Generation: ran, Type: "Job" + string(result), Message: reason}}
	return d
}

// lastRan is the last generation that ran, for the status of a job that
// ends now: the plan's if it is in phase run (running, or starting); the
// one before if it is in phase stop (stopping that one for the next).
func lastRan(v view) int64 {
	switch {
	case v.plan != nil && v.plan.Phase == membership.PhaseRun:
		return v.plan.Generation
	case v.plan != nil:
		return max(v.plan.Generation-1, 0)
	case v.status != nil:
		return v.status.Generation
	}
	return 0
}

// finalStatus is the status of a job whose final plan is p. It names
// ran, the last generation that ran, not p's: p, one past the last plan,
// only stops the sidecars. Told again from p alone (a new leader), the
// status already written keeps its generation.
func finalStatus(v view, p membership.Plan, ran int64) *membership.Status {
	s := planStatus(v, p, p.Result, 0, p.Reason)
	s.Generation = ran
	s.ExitCode = p.ExitCode
	if v.status != nil {
		s.Steps = v.status.Steps
	}
	return s
}

// runningStatus is the status of a generation in phase run: Running once
// every member acked, with the durations of its steps.
func runningStatus(v view, p membership.Plan, ready int, now time.Time) *membership.Status {
	if ready < len(p.Members) {
		return planStatus(v, p, membership.JobRestarting, 0, startingMessage(p))
	}
	s := planStatus(v, p, membership.JobRunning, ready, "")
	if v.status != nil && v.status.Phase == membership.JobRunning && v.status.Generation == p.Generation {
		s.Steps = v.status.Steps
		return s
	}
	s.Steps = stepsOf(p, now)
	return s
}

// stoppingMessage and startingMessage are the status messages of a plan's
// phases. Every decision in a phase says the same, so that the status is
// written once per phase.
func stoppingMessage(p membership.Plan) string {
	return fmt.Sprintf("stopping generation %d for generation %d: %s", p.Generation-1, p.Generation, p.Reason)
}

func startingMessage(p membership.Plan) string {
	return fmt.Sprintf("starting generation %d: %s, world size %d", p.Generation, english.Count(len(p.Members), "member"), p.WorldSize)
}

func stepsOf(p membership.Plan, running time.Time) *membership.Steps {
	s := &membership.Steps{Start: membership.Duration(running.Sub(p.RunAt)), Total: membership.Duration(running.Sub(p.DetectedAt))}
	if p.StopAt.IsZero() {
		s.Wait = membership.Duration(p.RunAt.Sub(p.DetectedAt))
		return s
	}
	s.Detect = membership.Duration(p.StopAt.Sub(p.DetectedAt))
	acked := p.AckedAt
	if acked.IsZero() {
		acked = p.StopAt
	}
	s.Stop = membership.Duration(acked.Sub(p.StopAt))
	s.Wait = membership.Duration(p.RunAt.Sub(acked))
	return s
}

func planStatus(v view, p membership.Plan, phase membership.JobPhase, ready int, msg string) *membership.Status {
	s := &membership.Status{Phase: phase, Ready: ready, Message: msg, Generation: p.Generation, Restarts: p.Restarts, Interruptions: p.Interruptions,
		HangRestarts: p.HangRestarts}
	if v.spec != nil {
		s.NP = v.spec.Workers()
	}
	if p.Phase == membership.PhaseRun {
		s.Members, s.WorldSize = len(p.Members), p.WorldSize
		for _, m := range p.Members {
			if m.Role == membership.RoleWorker {
				s.Workers++
			}
		}
	}
	return s
}

// baseStatus is a status of the job's current plan; Members and WorldSize
// count only a plan in phase run, the generation that runs.
func baseStatus(v view, phase membership.JobPhase, ready int, msg string) *membership.Status {
	if v.plan != nil {
		return planStatus(v, *v.plan, phase, ready, msg)
	}
	s := &membership.Status{Phase: phase, Ready: ready, Message: msg}
	if v.spec != nil {
		s.NP = v.spec.Workers()
	}
	return s
}

// carrySpec makes the status carry the spec the job runs under, so that
// a client can start a change from it while the stored spec is malformed,
// and a new leader can run the job on it (Status.Spec). A status that
// differs only there is written over.
func carrySpec(v view, d *decision) {
	if v.spec == nil {
		return
	}
	if v.status != nil && v.status.Phase.Done() {
		// A finished job's status keeps what it has: a rewrite would
		// restart its retention (expire counts from UpdatedAt).
		if d.status != nil && !sameSpec(d.status.Spec, v.status.Spec) {
			s := *d.status
			s.Spec = v.status.Spec
			d.status = &s
		}
		return
	}
	switch {
	case d.status != nil && !sameSpec(d.status.Spec, v.spec):
		s := *d.status
		s.Spec = v.spec
		d.status = &s
	case d.status == nil && v.status != nil && !sameSpec(v.status.Spec, v.spec):
		s := *v.status
		s.Spec = v.spec
		d.status = &s
	}
}

// sameStatus compares statuses without their time stamps.
func sameStatus(a, b *membership.Status) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.UpdatedAt, y.UpdatedAt = time.Time{}, time.Time{}
	if (x.Steps == nil) != (y.Steps == nil) || (x.Steps != nil && *x.Steps != *y.Steps) {
		return false
	}
	if !sameSpec(x.Spec, y.Spec) || !sameGoodput(x.Goodput, y.Goodput) {
		return false
	}
	x.Steps, y.Steps, x.Spec, y.Spec, x.Goodput, y.Goodput = nil, nil, nil, nil, nil, nil
	return x == y
}

func sameSpec(a, b *membership.Spec) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(*a, *b)
}

// allOf is "all 3 workers succeeded", or "the worker succeeded" for one.
func allOf(n int, noun, what string) string {
	if n == 1 {
		return "the " + noun + " " + what
	}
	return fmt.Sprintf("all %d %s %s", n, english.Plural(n, noun), what)
}

// nodeList names up to five nodes: "member a", "members a, b and 3 more".
func nodeList(noun string, ids []string) string {
	if len(ids) == 1 {
		return noun + " " + ids[0]
	}
	shown := ids
	more := ""
	if len(ids) > 5 {
		shown, more = ids[:5], fmt.Sprintf(" and %d more", len(ids)-5)
	}
	return noun + "s " + strings.Join(shown, ", ") + more
}
