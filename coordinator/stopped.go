package coordinator

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/membership"
)

// decideStopped waits for the stop acks of the previous table's members,
// and for evicted members to have fenced themselves, then for enough
// nodes, then commits phase run, or ends the job when the failure that
// stopped it is charged and the job cannot take it.
func decideStopped(v view, d decision, lim limits, now time.Time) decision {
	ix := v.index()
	var gen int64
	unacked, fencing := 0, 0
	if v.plan != nil {
		gen = v.plan.Generation
		if d.memo.stopGen != gen {
			d.memo.stopGen, d.memo.stopSeen, d.memo.evicted = gen, now, nil
		}
		pr := v.progress()
		unacked = pr.present - pr.acked
		fencing = unfenced(v, ix, &d, now)
	}
	switch {
	case v.spec.Suspend && v.status != nil && v.status.Phase == membership.JobSuspended && v.status.Generation == gen:
		// Suspended once every member stopped: the members' leaving
		// after (their pods removed) changes nothing.
		d.status = baseStatus(v, membership.JobSuspended, ix.roles[membership.RoleWorker], suspendedMessage(v.plan))
		return d
	case unacked > 0:
		return awaitAcks(v, d, lim, now)
	case fencing > 0:
		d.status = baseStatus(v, membership.JobRestarting, 0, stoppingMessage(*v.plan))
		return d // the records' expiry, or wakeAt, wakes the actor
	}
	if v.plan != nil && d.memo.ackedGen != gen {
		d.memo.ackedGen, d.memo.ackedAt = gen, now
	}
	if v.spec.Suspend {
		// Every member stopped (or was fenced): the job holds no ranks
		// until the suspension is lifted. A failure that stopped it is
		// charged then.
		d.memo.pendingSince = time.Time{}
		d.status = baseStatus(v, membership.JobSuspended, ix.roles[membership.RoleWorker], suspendedMessage(v.plan))
		return d
	}
	c := chargeStop(v, ix, d.memo.evicted)
	if c.fail != "" {
		return finish(v, now, membership.JobFailed, c.exitCode, c.fail)
	}
	return runNext(v, d, c, lim, now)
}

// unfenced counts the members evicted from the stop plan that may still
// run: an evicted member may not know yet, and kills its processes at its
// own deadline, before the record expires. A node of the same name
// registered since proves nothing: it may be a new pod on another machine
// (a StatefulSet's, after a forced deletion). One taken over is not: its
// processes were seen dead. The actor is woken when the first whose lease
// is known gone is certainly fenced.
func unfenced(v view, ix *nodeIndex, d *decision, now time.Time) int {
	fencing := 0
	for _, e := range v.fencing() {
		m, ok := v.plan.Member(e.Node)
		if !ok || m.Lease != e.Lease {
			continue
		}
		if n, ok := ix.lookup(m.Node); ok && int64(n.Lease) == m.Lease {
			continue // still there under that lease: an ack is awaited
		}
		gone, known := v.goneAt[m.Lease]
		if known && !now.Before(fencedAt(e, gone)) {
			continue
		}
		fencing++
		if known {
			wakeEarlier(d, fencedAt(e, gone))
		}
	}
	return fencing
}

// awaitAcks holds the job Restarting while members of the stop plan have
// not acked it. A slow stop is not a dead one: the timeout counts from the
// last ack seen, and only past it are the members that did not ack
// evicted.
func awaitAcks(v view, d decision, lim limits, now time.Time) decision {
	deadline := d.memo.stopSeen
	if pr := v.progress(); pr.lastAck.After(deadline) {
		deadline = pr.lastAck
	}
	deadline = deadline.Add(lim.stopTimeout)
	if now.Before(deadline) {
		d.wakeAt = deadline
	} else {
		d = evictUnacked(v, d, lim)
	}
	// No per-ack progress here: the status changes only between phases,
	// so a change costs O(1) writes however many nodes ack. Progress is
	// in the node records and elastic_job_unacked_members. A stop
	// slower than the timeout says so, once.
	msg := stoppingMessage(*v.plan)
	if now.Sub(d.memo.stopSeen) > lim.stopTimeout {
		msg += fmt.Sprintf("; slow: acks still arriving after more than the %s stop timeout", lim.stopTimeout)
	}
	d.status = baseStatus(v, membership.JobRestarting, 0, msg)
	return d
}

// evictUnacked evicts the members that did not ack the stop within the
// stop timeout. One event for them all, however many: a transaction
// holds at most 128 operations. An eviction that failed is tried again,
// but told only once.
func evictUnacked(v view, d decision, lim limits) decision {
	gen := v.plan.Generation
	d.evict = unackedMembers(v.plan, v.index())
	evicted := maps.Clone(d.memo.evicted)
	if evicted == nil {
		evicted = map[string]bool{}
	}
	var ids []string
	for _, n := range d.evict {
		if !evicted[n.ID] {
			evicted[n.ID] = true
			ids = append(ids, n.ID)
		}
	}
	d.memo.evicted = evicted
	if len(ids) > 0 {
		d.events = append(d.events, membership.Event{Generation: gen, Type: "NodeEvicted",
			Message: fmt.Sprintf("%s did not ack the stop of generation %d within %s of the last ack; evicted", nodeList("node", ids), gen, lim.stopTimeout)})
	}
	return d
}

// stopCharge is what the stop that ends costs the next run: its restarts,
// reason, excluded nodes and hang budget; or, when the job cannot take
// the failure or hang that stopped it, why it fails instead.
type stopCharge struct {
	restarts int
	reason   string
	excluded []string
	hang     hangCharge
	// fail, if set, is why the job fails, with exitCode.
	fail     string
	exitCode int
}

// chargeStop charges the hang or failure that stopped the job, if any.
// A member lost meanwhile may explain it: then nothing is charged.
func chargeStop(v view, ix *nodeIndex, evicted map[string]bool) stopCharge {
	p := v.plan
	if p == nil {
		return stopCharge{reason: "first generation"}
	}
	c := stopCharge{restarts: p.Restarts, reason: p.Reason, excluded: aliveExcludedList(p, ix),
		hang: hangCharge{restarts: p.HangRestarts, hangs: p.Hangs, atLeast: atLeastOf(p)}}
	if c.reason == reasonSuspended {
		c.reason = "resumed: the job is no longer suspended"
	}
	var lost []string
	if p.Failure != nil || p.Hang != nil {
		lost = lostMeanwhile(v, evicted)
	}
	if p.Hang != nil {
		if len(lost) > 0 {
			c.reason = fmt.Sprintf("%s; not charged: %s lost meanwhile", c.reason, nodeList("member", lost))
		} else {
			var ok bool
			var why string
			if c.hang, c.excluded, why, ok = chargeHang(v, ix, c.excluded); !ok {
				return stopCharge{fail: why, exitCode: 1}
			}
		}
	}
	if p.Failure != nil {
		if len(lost) > 0 {
			c.reason = fmt.Sprintf("%s; not charged: %s lost meanwhile", c.reason, nodeList("member", lost))
		} else {
			c = chargeFailure(v, ix, c)
		}
	}
	return c
}

// lostMeanwhile are the members of the stop plan lost since it was
// committed. A member evicted for a slow stop was alive when the fault
// happened: it explains nothing.
func lostMeanwhile(v view, evicted map[string]bool) []string {
	var lost []string
	for _, id := range sortedIDs(v.progress().lost) {
		if !evicted[id] && !evictedBy(v.evictions, id, "coordinator") {
			lost = append(lost, id)
		}
	}
	return lost
}

// chargeFailure spends a restart on the failure that stopped the job, and
// at fault tolerance level 2 excludes the node that failed. The job fails
// instead when it tolerates no fault, when the exit code is not one a
// restart answers, or when the restart budget is spent.
func chargeFailure(v view, ix *nodeIndex, c stopCharge) stopCharge {
	f := *v.plan.Failure
	fail := func(why string) stopCharge { return stopCharge{fail: why, exitCode: max(f.ExitCode, 1)} }
	switch {
	case v.spec.FaultTolerance == membership.FaultToleranceNone:
		return fail(c.reason + " and fault tolerance is 0")
	case len(v.spec.RetryableExitCodes) > 0 && !slices.Contains(v.spec.RetryableExitCodes, f.ExitCode):
		return fail(fmt.Sprintf("%s and exit code %d is not one a restart answers %v", c.reason, f.ExitCode, v.spec.RetryableExitCodes))
	case c.restarts >= v.spec.MaxRestarts:
		return fail(fmt.Sprintf("%s and the restart budget of %d is spent", c.reason, v.spec.MaxRestarts))
	}
	c.restarts++
	if v.spec.FaultTolerance == membership.FaultToleranceReplace {
		if _, ok := ix.lookup(f.Node); ok {
			c.excluded = appendUnique(c.excluded, f.Node)
		}
	}
	return c
}

// runNext commits phase run of the next generation on the ranks the nodes
// there give, charged c. Too few nodes, or fewer than the most np allows
// while the settle window lasts, and the job waits.
func runNext(v view, d decision, c stopCharge, lim limits, now time.Time) decision {
	excludedSet := map[string]bool{}
	for _, id := range c.excluded {
		excludedSet[id] = true
	}
	t, short, _ := ranksFor(v, &d.memo, excludedSet)
	if short != nil {
		d.memo.pendingSince = time.Time{}
		d.status = baseStatus(v, membership.JobWaiting, short.available, short.String())
		return d
	}
	if settling(&d, v.spec, t.workers, lim, now, v.index()) {
		d.status = baseStatus(v, membership.JobWaiting, t.workers,
			fmt.Sprintf("settling: %d of at most %s; starting when the %s settle window ends", t.workers, english.Count(v.spec.Workers().Max, "worker"), lim.settle))
		return d
	}
	t = warmPlaced(v, t, excludedSet)

	next := membership.Plan{
		Generation: 1, Phase: membership.PhaseRun, Members: t.members, WorldSize: t.worldSize, Master: t.master, Gloo: t.gloo,
		MaxRestarts: v.spec.MaxRestarts, Reason: c.reason, Restarts: c.restarts, Excluded: c.excluded, DetectedAt: now, RunAt: now,
		HangRestarts: c.hang.restarts, MaxHangRestarts: v.spec.MaxHangRestarts, Hangs: c.hang.hangs, Watch: hangWatch(v, c.hang.atLeast),
	}
	if v.plan != nil {
		// The stop plan already carries the generation it stops for.
		next.Generation, next.Interruptions = v.plan.Generation, v.plan.Interruptions
		next.DetectedAt, next.StopAt, next.AckedAt = v.plan.DetectedAt, v.plan.StopAt, d.memo.ackedAt
	} else if !d.memo.pendingSince.IsZero() {
		next.DetectedAt = d.memo.pendingSince
	}
	d.memo.pendingSince = time.Time{}
	d.plan = &next
	d.status = planStatus(v, next, membership.JobRestarting, 0, startingMessage(next))
	d.events = append(d.events, membership.Event{Generation: next.Generation, Type: "GenerationStarting", Members: len(t.members), WorldSize: t.worldSize,
		Message: fmt.Sprintf("run: %s, %s, world size %d, master %s (%s)", english.Count(len(t.members), "member"), english.Count(t.workers, "worker"), t.worldSize, t.master, next.Reason)})
	return d
}

// warmPlaced is table t placed for warmth (assignWarmRanks) while a node
// says its next start would be cold, so that a warm standby node takes a
// cold member's rank; t itself otherwise, at no cost. It is computed only
// here, for the run that is committed, never to decide whether to restart:
// a change of warmth alone restarts nothing.
func warmPlaced(v view, t table, excluded map[string]bool) table {
	ix := v.index()
	if ix.cold == 0 || v.plan == nil {
		return t
	}
	w, short := assignWarmRanks(*v.spec, ix.joinOrder(), v.plan.Members, excluded)
	if short != nil {
		return t
	}
	return w
}

// evictedBy reports whether node has an eviction record written by by.
func evictedBy(evictions []membership.Eviction, node, by string) bool {
	return slices.ContainsFunc(evictions, func(e membership.Eviction) bool {
		return e.Node == node && e.By == by
	})
}

// unackedMembers are the members of a stop plan still alive under the
// lease it names that have not acked it.
func unackedMembers(p *membership.Plan, ix *nodeIndex) []membership.LiveNode {
	var out []membership.LiveNode
	for _, m := range p.Members {
		n, ok := ix.lookup(m.Node)
		if ok && int64(n.Lease) == m.Lease && (n.State != membership.NodeStopped || n.Generation < p.Generation) {
			out = append(out, n)
		}
	}
	return out
}

func sortedIDs(set map[string]bool) []string {
	ids := make([]string, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// reasonSuspended is the reason of the stop a suspension commits.
const reasonSuspended = "the job is suspended"

// suspendedMessage says what a suspended job last ran; p is its stop
// plan, if any.
func suspendedMessage(p *membership.Plan) string {
	if p == nil {
		return "suspended: no generation has run; the job starts when the suspension is lifted"
	}
	return fmt.Sprintf("suspended: generation %d stopped; the job resumes from its saved state when the suspension is lifted", p.Generation-1)
}
