package coordinator

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// A rank that hangs stalls every rank of its generation: its peers wait
// for it in their next collective, and their sidecars find them quiet a
// moment after its own finds it. The leader makes one decision for them
// all: the generation stops once, and the report it names is the rank
// that hung.

// hangSettle is how long the leader waits, after the first report that a
// rank of a generation hung, for its peers' nodes to report theirs, so
// that it names the rank whose last sign of life is oldest rather than
// whichever node's report came first. A stopped process needs no wait: it
// is the cause.
const hangSettle = 300 * time.Millisecond

// hangAfterQuiet is how long after a declared quiet phase ends its peers'
// hang reports wait before they count: the time their sidecars take to see
// them step again.
const hangAfterQuiet = 3 * time.Second

// quietEnd is the latest end of a quiet phase the generation's running
// members declared; zero for none.
func quietEnd(v view, p membership.Plan) time.Time {
	var end time.Time
	ix := v.index()
	for _, m := range p.Members {
		if n, ok := ix.lookup(m.Node); ok && n.Generation == p.Generation && n.State == membership.NodeRunning && n.QuietUntil.After(end) {
			end = n.QuietUntil
		}
	}
	return end
}

// hangGrowth is how much the least hang timeout of a job grows after a
// hang restart: a legitimate pause longer than the timeout (an evaluation,
// a large save) may cost one restart, and passes the next time.
const hangGrowth = 10

// hangsToExclude is how many hangs of its ranks exclude a node, as a
// failure does at fault tolerance level 2, whatever the level.
const hangsToExclude = 2

// decideHang stops the generation when a running member reported a hung
// rank, once the reports of its peers had hangSettle to arrive. It
// reports false while there is nothing to decide yet.
func decideHang(v view, d decision, now time.Time) (decision, bool) {
	pr := v.progress()
	if len(pr.hung) == 0 {
		d.memo.hangGen = 0 // a report withdrawn: the next one settles anew
		return d, false
	}
	p := *v.plan
	ix := v.index()
	var reports []membership.Hang
	stopped := false
	for _, id := range sortedIDs(pr.hung) {
		n, ok := ix.lookup(id)
		if !ok || n.Hang == nil {
			continue
		}
		h := *n.Hang
		h.Node = id
		stopped = stopped || h.Stopped
		reports = append(reports, h)
	}
	if len(reports) == 0 {
		return d, false
	}
	if d.memo.hangGen != p.Generation {
		d.memo.hangGen, d.memo.hangSeen = p.Generation, now
	}
	if until := d.memo.hangSeen.Add(hangSettle); !stopped && len(reports) < pr.ready && now.Before(until) {
		wakeEarlier(&d, until)
		d.status = runningStatus(v, p, pr.ready, now)
		return d, true
	}
	// A rank in a long phase it declared (a rank-0-only evaluation or
	// save) keeps its peers waiting in their next collective: they are
	// not hung until it is over, and hangAfterQuiet after it, which their
	// sidecars take to see them step again and withdraw their reports.
	if until := quietEnd(v, p).Add(hangAfterQuiet); !stopped && now.Before(until) {
		wakeEarlier(&d, until)
		d.status = runningStatus(v, p, pr.ready, now)
		return d, true
	}
	h := culprit(reports)
	d = stopNext(v, d, now, d.memo.hangSeen, h.String(), true, aliveExcludedList(&p, ix))
	d.plan.Hang = &h
	d.events = append(d.events, membership.Event{Generation: p.Generation, Type: "RankHung", Message: h.String()})
	return d, true
}

// culprit is the report of the rank that hung: a stopped one; else the
// one whose last sign of life is oldest (its peers went on to their next
// collective and wait there); then the lowest step, then the lowest rank.
func culprit(reports []membership.Hang) membership.Hang {
	sort.SliceStable(reports, func(i, j int) bool {
		a, b := reports[i], reports[j]
		switch {
		case a.Stopped != b.Stopped:
			return a.Stopped
		case !a.LastActivity.Equal(b.LastActivity):
			return a.LastActivity.Before(b.LastActivity)
		case a.Step != b.Step:
			return a.Step < b.Step
		}
		return a.Rank < b.Rank
	})
	return reports[0]
}

// hangCharge is what a stop phase caused by a hang does to the next run:
// spends one of the hang budget, counts the node's hangs, excludes a node
// that hung again (or at once at fault tolerance level 2), and grows the
// job's least hang timeout. ok is false when the budget is spent or the
// job tolerates no fault: it fails, saying why.
type hangCharge struct {
	restarts int
	hangs    map[string]int
	atLeast  membership.Duration
}

func chargeHang(v view, ix *nodeIndex, excluded []string) (hangCharge, []string, string, bool) {
	p := v.plan
	h := *p.Hang
	c := hangCharge{restarts: p.HangRestarts, atLeast: atLeastOf(p)}
	switch {
	case v.spec.FaultTolerance == membership.FaultToleranceNone:
		return c, excluded, p.Reason + " and fault tolerance is 0", false
	case p.HangRestarts >= v.spec.MaxHangRestarts:
		return c, excluded, fmt.Sprintf("%s and the hang budget of %d is spent", p.Reason, v.spec.MaxHangRestarts), false
	}
	c.restarts++
	c.hangs = make(map[string]int, len(p.Hangs)+1)
	for id, k := range p.Hangs {
		if _, ok := ix.lookup(id); ok {
			c.hangs[id] = k
		}
	}
	c.hangs[h.Node]++
	if _, alive := ix.lookup(h.Node); alive && (c.hangs[h.Node] >= hangsToExclude || v.spec.FaultTolerance == membership.FaultToleranceReplace) {
		excluded = appendUnique(excluded, h.Node)
	}
	if !h.Stopped {
		c.atLeast = max(c.atLeast, h.Timeout*hangGrowth)
	}
	return c, excluded, p.Reason, true
}

// atLeastOf is the least hang timeout the plan carries.
func atLeastOf(p *membership.Plan) membership.Duration {
	if p == nil || p.Watch == nil {
		return 0
	}
	return p.Watch.AtLeast
}

// hangWatch is how a run plan's ranks are watched: the spec's timeouts,
// the least timeout the job's hang restarts grew, and whether its ranks
// are known to report progress (a member's record showed a step).
func hangWatch(v view, atLeast membership.Duration) *membership.HangWatch {
	w := &membership.HangWatch{Timeout: v.spec.HangTimeout, Startup: v.spec.StartupTimeout, AtLeast: atLeast}
	if v.plan != nil && v.plan.Watch != nil {
		w.Expect = v.plan.Watch.Expect
	}
	if !w.Expect && v.plan != nil {
		w.Expect = slices.ContainsFunc(v.plan.Members, func(m membership.Member) bool {
			n, ok := v.index().lookup(m.Node)
			return ok && n.Progress != nil && n.Progress.Step > 0
		})
	}
	return w
}
