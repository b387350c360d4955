package coordinator

import (
	"math"
	"reflect"
	"slices"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// The leader keeps each job's goodput account (membership.Goodput): what
// the job's wall time went to, by cause. The cause follows the status's
// phase (Running: training; Restarting: restarting; Waiting: waiting),
// and what the nodes' step marks say later moves seconds out of
// training: the time before every rank's first step of a generation
// (restarting), the time between the job's last progress and the stop
// that followed (restarting, or hung when a hung rank caused the stop),
// and the steps trained again after a resume below the furthest step
// (redone). Everything it needs to go on is in the account itself, so
// that a new leader continues from the stored one.

// flushEvery is how often at most an account that changed while the
// status did not is written with it.
const flushEvery = time.Second

// ledger is the actor's account and when it last wrote it.
type ledger struct {
	g       *membership.Goodput
	dirty   bool // changed since written, beyond its clock
	flushed time.Time
	// spans are the account's changes not yet written in an event.
	spans []membership.Span
}

// written forgets the spans a decision wrote: the first n.
func (l *ledger) written(n int) {
	l.spans = l.spans[min(n, len(l.spans)):]
	if len(l.spans) == 0 {
		l.spans = nil
	}
}

// account brings the job's account to now, in d's status if the status
// is written anyway, or if it changed and was last written flushEvery ago;
// else the status keeps the stored account, and d asks to decide again
// when it may be written.
func (a *jobActor) account(v view, d *decision, now time.Time) {
	base, next := v.status, d.status
	if next == nil {
		next = base
	}
	if next == nil {
		return // nothing to account yet
	}
	l := &a.ledger
	if base == nil && l.g != nil && l.g.Now == "" {
		l.g, l.spans = nil, nil // a job of the same name again
	}
	if l.g == nil {
		if base != nil && base.Goodput != nil {
			l.g = base.Goodput.Clone()
		} else {
			l.g, l.dirty = membership.NewGoodput(now, causeOf(next.Phase, nil)), true
			l.g.StartingUp = true // a new job's
			l.spans = append(l.spans, membership.Span{Cause: l.g.Now, From: now})
		}
	}
	if classify(l.g, v, d, next, now) {
		l.dirty = true
	}
	l.spans = append(l.spans, l.g.Changes()...)
	var stored *membership.Goodput
	if base != nil {
		stored = base.Goodput
	}
	written := d.status != nil && !sameStatusBut(d.status, base)
	switch {
	case written || (l.dirty && now.Sub(l.flushed) >= flushEvery):
		s := *next
		s.Goodput = l.g.Clone()
		d.status = &s
		l.dirty, l.flushed = false, now
		tellSpans(d, l.spans, s.Generation)
	case l.dirty:
		wakeEarlier(d, l.flushed.Add(flushEvery))
		fallthrough
	default:
		if d.status != nil {
			s := *d.status
			s.Goodput = stored
			d.status = &s
		}
	}
}

// tellSpans puts the account's changes in the decision's first event, or
// in an event of their own (TimeAccounted) if it has none and they moved
// time already counted: a change of the cause from now on (the status
// says it) waits for the next event.
func tellSpans(d *decision, spans []membership.Span, gen int64) {
	if len(spans) == 0 || len(d.events) == 0 && !slices.ContainsFunc(spans, func(s membership.Span) bool { return !s.To.IsZero() }) {
		return
	}
	d.accounted = len(spans)
	spans = slices.Clone(spans)
	if len(d.events) > 0 {
		d.events[0].Accounted = spans
		return
	}
	d.events = append(d.events, membership.Event{Generation: gen, Type: "TimeAccounted",
		Message: membership.SpansText(spans), Accounted: spans})
}

// sameStatusBut compares statuses but for their accounts.
func sameStatusBut(a, b *membership.Status) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Goodput, y.Goodput = nil, nil
	return sameStatus(&x, &y)
}

func sameGoodput(a, b *membership.Goodput) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(*a, *b)
}

// causeOf is the cause of a job in phase p; none once it ended. A job
// whose ranks never trained (that is not leaving a span of training) is
// starting where it would be restarting.
func causeOf(p membership.JobPhase, g *membership.Goodput) membership.Cause {
	switch p {
	case membership.JobRunning:
		return membership.CauseTraining
	case membership.JobWaiting:
		return membership.CauseWaiting
	case membership.JobRestarting:
		if g == nil || g.StartingUp && g.Now != membership.CauseTraining {
			return membership.CauseStarting
		}
		return membership.CauseRestarting
	case membership.JobSuspended:
		return membership.CauseSuspended
	}
	return ""
}

// classify brings g to now for a job whose status will be next: it counts
// the time since g's last moment, follows a change of cause, and moves
// out of training what the nodes' step marks show was not. It reports a
// change beyond the clock.
func classify(g *membership.Goodput, v view, d *decision, next *membership.Status, now time.Time) bool {
	if g.Now == "" {
		return false // the job ended: so did its account
	}
	g.Accrue(now)
	changed := false
	if cause := causeOf(next.Phase, g); cause != g.Now {
		changed = true
		switchCause(g, v, d, next, cause, now)
	}
	if classifyFirst(g, v, now) {
		changed = true
	}
	if !g.TrainingTo.IsZero() && classifyLast(g, v, stopDone(g, v, d)) {
		changed = true
	}
	return changed
}

// switchCause follows the job from g.Now to cause at now: it closes a
// training span (noting a hang that stopped it), classes a wait that
// ended, and opens a training span.
func switchCause(g *membership.Goodput, v view, d *decision, next *membership.Status, cause membership.Cause, now time.Time) {
	switch g.Now {
	case membership.CauseTraining:
		g.TrainingTo = now
		g.StartingUp = false // it trained a whole span
		p := v.plan
		if d.plan != nil {
			p = d.plan // the stop this decision commits
		}
		if p != nil && p.Phase == membership.PhaseStop && p.Hang != nil {
			g.HungStop, g.HungSince = true, p.Hang.LastActivity
		}
	case membership.CauseWaiting:
		classifyWait(g, v, now)
	}
	if cause != membership.CauseTraining && (cause == "" || next.Phase.Done()) {
		// A job that ends trained until it ended: its last
		// progress moves nothing.
		classifyFirst(g, v, now)
		g.LastClassed = true
	}
	if cause == membership.CauseTraining {
		// What the last span's marks say is taken before the span
		// is forgotten.
		classifyFirst(g, v, now)
		classifyLast(g, v, true)
		g.Generation, g.TrainingFrom, g.TrainingTo = next.Generation, now, time.Time{}
		g.FirstClassed, g.LastClassed, g.HungStop, g.HungSince = false, false, false, time.Time{}
	}
	g.Switch(cause, now)
}

// classifyWait moves the end of a wait that ends at now to starting: from
// when the sidecar of the node that joined last started (its warm
// interpreters importing the job's preloads; it registers once they are
// ready) to now. Before that the job waited for a node that was not there.
func classifyWait(g *membership.Goodput, v view, now time.Time) {
	var last membership.LiveNode
	for _, n := range v.index().nodes {
		if n.JoinRevision > last.JoinRevision {
			last = n
		}
	}
	from := last.Started
	if from.IsZero() || !from.Before(now) {
		return // a sidecar that does not say when it started
	}
	if from.Before(g.NowSince) {
		from = g.NowSince
	}
	g.Move(from, now, membership.CauseWaiting, membership.CauseStarting)
}

// marksOf are the step marks of generation gen among the job's nodes.
func marksOf(v view, gen int64) []membership.StepMarks {
	var out []membership.StepMarks
	for _, n := range v.index().nodes {
		if n.Marks != nil && n.Marks.Generation == gen {
			out = append(out, *n.Marks)
		}
	}
	return out
}

// classifyFirst moves the start of the span up to the last member's first
// step to restarting (to starting if the job never trained before), once
// every member of the span's generation marked
// it, and counts the steps that generation trains again. Ranks that mark
// no first step leave the span training from every member running.
func classifyFirst(g *membership.Goodput, v view, now time.Time) bool {
	if g.FirstClassed || g.Generation == 0 || g.TrainingFrom.IsZero() || v.plan == nil {
		return false
	}
	members := len(v.plan.Members)
	if v.plan.Generation != g.Generation || v.plan.Phase != membership.PhaseRun {
		members = 0 // counted from the run plan only
	}
	var last membership.StepMarks
	n := 0
	for _, m := range marksOf(v, g.Generation) {
		if m.First.IsZero() {
			continue
		}
		n++
		if m.First.After(last.First) {
			last = m
		}
	}
	if members == 0 || n < members {
		return false
	}
	g.FirstClassed = true
	end := g.TrainingTo
	if end.IsZero() {
		end = now
	}
	first := last.First
	if first.After(end) {
		first = end // another clock
	}
	if first.After(g.TrainingFrom) {
		to := membership.CauseRestarting
		if g.StartingUp {
			to = membership.CauseStarting // the job's first steps
		}
		g.Move(g.TrainingFrom, first, membership.CauseTraining, to)
		g.TrainingFrom = first
	}
	g.StartingUp = false
	if resumed, ok := resumedAt(marksOf(v, g.Generation), time.Duration(g.StepTime)); ok && g.Furthest > 0 {
		st := time.Duration(g.StepTime)
		if again := g.Furthest - resumed; again > 0 {
			owed := float64(again) * st.Seconds()
			until := end
			if g.AsOf.Before(until) {
				until = g.AsOf
			}
			trained := until.Sub(g.TrainingFrom).Seconds()
			pay := max(min(owed, trained), 0)
			g.Move(g.TrainingFrom, g.TrainingFrom.Add(time.Duration(pay*float64(time.Second))), membership.CauseTraining, membership.CauseRedone)
			g.TrainingFrom = g.TrainingFrom.Add(time.Duration(pay * float64(time.Second)))
			g.Owe(owed - pay)
		}
	}
	return true
}

// resumedAt is the step a generation resumed from, as its nodes that name
// steps tell it: a node's first named step, less the steps taken before it
// since the node's first step, at step time st. Commonly only rank 0 names
// steps (it alone saves), so every node that does is asked, not only the
// one that stepped last. The node that named a step soonest after its
// first is taken: its figure is the least extrapolated (a node's first
// step is its slowest rank's, so the steps before the named one are an
// estimate, never fewer than none).
func resumedAt(marks []membership.StepMarks, st time.Duration) (int64, bool) {
	if st <= 0 {
		return 0, false
	}
	var resumed, before int64
	ok := false
	for _, m := range marks {
		if m.Resumed <= 0 || m.First.IsZero() {
			continue
		}
		b := max(int64(math.Round(float64(m.ResumedAt.Sub(m.First))/float64(st))), 0)
		if !ok || b < before || b == before && m.Resumed-b > resumed {
			resumed, before, ok = m.Resumed-b, b, true
		}
	}
	return resumed, ok
}

// stopDone reports whether the stop that ended the span was acked by
// every node there is to ack it, or is over: its acks' marks are all in.
func stopDone(g *membership.Goodput, v view, d *decision) bool {
	p := v.plan
	switch {
	case p == nil || p.Generation <= g.Generation:
		return false
	case p.Phase == membership.PhaseRun, p.Final(), d.plan != nil:
		return true
	}
	pr := v.progress()
	return pr.acked >= pr.present
}

// classifyLast moves the end of the span, from the job's last progress
// (the latest last step its nodes' acks mark; for a hang, the hung rank's
// last sign of life if earlier) to the stop, out of training: to hung when a hung rank caused the stop, else to
// restarting. It learns the furthest step and the step time on the way.
// With ready false it waits for more acks.
func classifyLast(g *membership.Goodput, v view, ready bool) bool {
	if g.LastClassed || g.TrainingTo.IsZero() || !ready {
		return false
	}
	g.LastClassed = true
	var last time.Time
	for _, m := range marksOf(v, g.Generation) {
		if m.Last.After(last) {
			last = m.Last
		}
		g.Furthest = max(g.Furthest, m.Furthest)
		if m.Resumed > 0 && m.Furthest > m.Resumed && m.Last.After(m.ResumedAt) {
			g.StepTime = membership.Duration(m.Last.Sub(m.ResumedAt) / time.Duration(m.Furthest-m.Resumed))
		}
	}
	if g.HungStop && !g.HungSince.IsZero() && (last.IsZero() || g.HungSince.Before(last)) {
		// The hung rank's last sign of life: its peers may step once
		// more after the stop, when it is woken to write its stack.
		last = g.HungSince
	}
	if last.IsZero() || !last.Before(g.TrainingTo) {
		return true
	}
	from := last
	if from.Before(g.TrainingFrom) {
		from = g.TrainingFrom
	}
	to := membership.CauseRestarting
	if g.HungStop {
		to = membership.CauseHung
	}
	g.Move(from, g.TrainingTo, membership.CauseTraining, to)
	return true
}
