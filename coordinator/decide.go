package coordinator

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/membership"
)

// view is what the leader knows of one job, read from etcd.
type view struct {
	job     string
	spec    *membership.Spec
	specErr error
	// idx holds the valid node records, indexed; a view made by hand
	// gives nodes instead (in join order), and index builds idx from them.
	idx     *nodeIndex
	nodes   []membership.LiveNode
	plan    *membership.Plan
	planErr error
	// planRev is the plan's ModRevision, 0 when there is none: the
	// decision's write is conditional on it.
	planRev int64
	status  *membership.Status
	// evictions are the eviction records: an evicted node's processes may
	// run until the record expires, or until its time in fencedAt.
	evictions []membership.Eviction
	// fencedAt is, by evicted lease, when the evicted node's processes are
	// certainly dead on the leader's own clock: a TTL after the leader saw
	// the lease gone, since the node renewed it last before that. It ends
	// the wait sooner than the record's expiry, which etcd stretches by a
	// full TTL at each of its leader changes.
	fencedAt map[int64]time.Time
}

// index is the view's node index.
func (v *view) index() *nodeIndex {
	if v.idx == nil {
		v.idx = indexOf(v.nodes)
	}
	return v.idx
}

// memo is what the leader remembers between decisions of one job beyond
// what etcd holds. Losing it (a failover) only delays a settle window.
type memo struct {
	// pendingSince is when a run that waits for the settle window was first
	// possible.
	pendingSince time.Time
	// ackedGen's stop phase completed at ackedAt.
	ackedGen int64
	ackedAt  time.Time
	// stopGen's stop phase was first seen by this leader at stopSeen, on
	// its own monotonic clock: the stop timeout counts from there, never
	// from a time another replica wrote.
	stopGen  int64
	stopSeen time.Time
	// evicted are the members this leader evicted in stopGen's stop phase.
	evicted map[string]bool
}

// timing holds the protocol's time limits.
type timing struct {
	settle      time.Duration
	stopTimeout time.Duration
	// retention is how long a finished job's keys are kept; 0 keeps them.
	retention time.Duration
}

// decision is what to write for a job. The plan, status and events go into
// one transaction fenced on the leader's election key.
type decision struct {
	// deleteJob deletes every key of the finished job: its retention
	// is over.
	deleteJob bool
	plan      *membership.Plan
	status    *membership.Status
	events    []membership.Event // Seq and Time are filled in when written
	evict     []membership.LiveNode
	// wakeAt asks for another decision at that time even if nothing changes.
	wakeAt time.Time
	memo   memo
}

// decide computes the next step of a job's protocol. It is a pure function
// of its arguments, so every replica decides the same from the same etcd.
func decide(v view, m memo, tm timing, now time.Time) decision {
	d := decision{memo: m}
	switch {
	case v.plan != nil && v.plan.Final():
		d.status = finalStatus(v, *v.plan)
		expire(v, &d, tm, now)
		return d
	case v.spec != nil && v.spec.Cancel != "":
		return finish(v, now, membership.JobFailed, 1, "cancelled: "+v.spec.Cancel)
	case v.specErr != nil:
		return finish(v, now, membership.JobFailed, 1, fmt.Sprintf("invalid spec: %v", v.specErr))
	case v.planErr != nil:
		return finish(v, now, membership.JobFailed, 1, fmt.Sprintf("invalid plan: %v", v.planErr))
	case v.spec == nil:
		// No spec: nothing to aim for. A job with nodes says so; a job
		// with neither spec nor plan (deleted) is left alone.
		if ix := v.index(); v.plan == nil && len(ix.nodes) > 0 {
			d.status = &membership.Status{Phase: membership.JobWaiting, Ready: ix.roles[membership.RoleWorker],
				Message: "waiting for a spec: set np with `coordinator scale` or a sidecar's --np"}
		}
		return d
	case v.plan == nil || v.plan.Phase == membership.PhaseStop:
		return decideStopped(v, d, tm, now)
	default:
		return decideRunning(v, d, tm, now)
	}
}

// expire deletes a finished job once its retention has passed since it
// ended, unless a Kubernetes resource runs it: that resource's deletion
// removes its keys, and its controller would otherwise write it again.
// A job whose node or eviction records remain is kept: their processes may
// still run, and a job created again under the same name must not start a
// generation beside them.
func expire(v view, d *decision, tm timing, now time.Time) {
	if tm.retention <= 0 || v.status == nil || !v.status.Phase.Done() || (v.spec != nil && v.spec.Owner != "") {
		return
	}
	if len(v.index().nodes) > 0 || len(v.evictions) > 0 {
		return // the watch brings their going
	}
	at := v.status.UpdatedAt.Add(tm.retention)
	if now.Before(at) {
		d.wakeAt = at
		return
	}
	d.deleteJob = true
}

// decideStopped waits for the stop acks of the previous table's members,
// and for evicted members to have fenced themselves, then for enough
// nodes, then commits phase run, or ends the job when the failure that
// stopped it is charged and the job cannot take it.
func decideStopped(v view, d decision, tm timing, now time.Time) decision {
	ix := v.index()
	var gen int64
	unacked, fencing := 0, 0
	var pr *progress
	if v.plan != nil {
		gen = v.plan.Generation
		if d.memo.stopGen != gen {
			d.memo.stopGen, d.memo.stopSeen, d.memo.evicted = gen, now, nil
		}
		pr = ix.progressOf(v.plan)
		unacked = pr.present - pr.acked
		// An evicted member may not know yet, and kills its processes at
		// its own deadline, before the record expires. A node of the same
		// name registered since proves nothing: it may be a new pod on
		// another machine (a StatefulSet's, after a forced deletion).
		for _, e := range v.evictions {
			m, ok := v.plan.Member(e.Node)
			if !ok || m.Lease != e.Lease {
				continue
			}
			if n, ok := ix.lookup(m.Node); ok && int64(n.Lease) == m.Lease {
				continue // still there under that lease: an ack is awaited
			}
			at, known := v.fencedAt[m.Lease]
			if known && !now.Before(at) {
				continue
			}
			fencing++
			if known && (d.wakeAt.IsZero() || at.Before(d.wakeAt)) {
				d.wakeAt = at
			}
		}
	}
	if unacked > 0 {
		// A slow stop is not a dead one: the timeout counts from the
		// last ack seen.
		deadline := d.memo.stopSeen
		if pr.lastAck.After(deadline) {
			deadline = pr.lastAck
		}
		deadline = deadline.Add(tm.stopTimeout)
		if now.Before(deadline) {
			d.wakeAt = deadline
		} else {
			d.evict = unackedMembers(v.plan, ix)
			// One event for them all, however many: a transaction
			// holds at most 128 operations. An eviction that failed
			// is tried again, but told only once.
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
					Message: fmt.Sprintf("%s did not ack the stop of generation %d within %s of the last ack; evicted", nodeList("node", ids), gen, tm.stopTimeout)})
			}
		}
		// No per-ack progress here: the status changes only between phases,
		// so a change costs O(1) writes however many nodes ack. Progress is
		// in the node records and elastic_job_unacked_members. A stop
		// slower than the timeout says so, once.
		msg := stoppingMessage(*v.plan)
		if now.Sub(d.memo.stopSeen) > tm.stopTimeout {
			msg += fmt.Sprintf("; slow: acks still arriving after more than the %s stop timeout", tm.stopTimeout)
		}
		d.status = baseStatus(v, membership.JobRestarting, 0, msg)
		return d
	}
	if fencing > 0 {
		d.status = baseStatus(v, membership.JobRestarting, 0, stoppingMessage(*v.plan))
		return d // the records' expiry, or wakeAt, wakes the actor
	}
	if v.plan != nil && d.memo.ackedGen != gen {
		d.memo.ackedGen, d.memo.ackedAt = gen, now
	}

	restarts, reason, excluded := 0, "first generation", []string(nil)
	if v.plan != nil {
		restarts, reason, excluded = v.plan.Restarts, v.plan.Reason, aliveExcludedList(v.plan, ix)
	}
	if v.plan != nil && v.plan.Failure != nil {
		f := *v.plan.Failure
		// A member evicted for a slow stop was alive when the failure
		// happened: it explains nothing.
		var lost []string
		for _, id := range sortedIDs(pr.lost) {
			if !d.memo.evicted[id] && !evictedBy(v.evictions, id, "coordinator") {
				lost = append(lost, id)
			}
		}
		if len(lost) > 0 {
			reason = fmt.Sprintf("%s; not charged: %s lost meanwhile", reason, nodeList("member", lost))
		} else {
			switch {
			case v.spec.FaultTolerance == membership.FaultToleranceNone:
				return finish(v, now, membership.JobFailed, max(f.ExitCode, 1), reason+" and fault tolerance is 0")
			case len(v.spec.RetryableExitCodes) > 0 && !slices.Contains(v.spec.RetryableExitCodes, f.ExitCode):
				return finish(v, now, membership.JobFailed, max(f.ExitCode, 1),
					fmt.Sprintf("%s and exit code %d is not one a restart answers %v", reason, f.ExitCode, v.spec.RetryableExitCodes))
			case restarts >= v.spec.MaxRestarts:
				return finish(v, now, membership.JobFailed, max(f.ExitCode, 1),
					fmt.Sprintf("%s and the restart budget of %d is spent", reason, v.spec.MaxRestarts))
			}
			restarts++
			if v.spec.FaultTolerance == membership.FaultToleranceReplace {
				if _, ok := ix.lookup(f.Node); ok {
					excluded = appendUnique(excluded, f.Node)
				}
			}
		}
	}
	excludedSet := map[string]bool{}
	for _, id := range excluded {
		excludedSet[id] = true
	}

	t, short, _ := ix.ranksFor(v.spec, v.plan, excludedSet)
	if short != nil {
		d.memo.pendingSince = time.Time{}
		d.status = baseStatus(v, membership.JobWaiting, short.available, short.String())
		return d
	}
	if settling(&d, v.spec, t.workers, tm, now) {
		d.status = baseStatus(v, membership.JobWaiting, t.workers,
			fmt.Sprintf("settling: %d of at most %s; starting when the %s settle window ends", t.workers, english.Count(v.spec.Workers().Max, "worker"), tm.settle))
		return d
	}

	next := membership.Plan{
		Generation: gen + 1, Phase: membership.PhaseRun, Members: t.members, WorldSize: t.worldSize, Master: t.master, Gloo: t.gloo,
		MaxRestarts: v.spec.MaxRestarts, Reason: reason, Restarts: restarts, Excluded: excluded, DetectedAt: now, RunAt: now,
	}
	if v.plan != nil {
		next.Generation = gen
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

// decideRunning watches a generation in phase run: lost members, failed or
// succeeded children, and changes of membership or spec.
func decideRunning(v view, d decision, tm timing, now time.Time) decision {
	p := *v.plan
	ix := v.index()
	pr := ix.progressOf(v.plan)
	spec := *v.spec

	// A member lost or leaving is a membership change, whatever the fault
	// tolerance: the budget and the fault tolerance level are for failures.
	if len(pr.lost) > 0 {
		reason := fmt.Sprintf("%s lost", nodeList("member", sortedIDs(pr.lost)))
		return stopNext(v, d, now, now, reason, p.Restarts, aliveExcludedList(&p, ix))
	}

	ready, workersDone, rank0Done, workers := pr.ready, pr.workersDone, pr.rank0Done > 0, pr.workers
	if len(pr.failed) > 0 {
		// The first to report is the cause; peers often fail after it.
		failed := sortedIDs(pr.failed)
		sort.SliceStable(failed, func(i, j int) bool {
			a, _ := ix.lookup(failed[i])
			b, _ := ix.lookup(failed[j])
			return a.ModRevision < b.ModRevision
		})
		n, _ := ix.lookup(failed[0])
		f, _ := p.Member(failed[0])
		code := n.ExitCode
		if code == 0 {
			code = 1
		}
		if n.CannotStart {
			// Not a fault a restart mends: the job fails at once,
			// spending nothing.
			return finish(v, now, membership.JobFailed, code, fmt.Sprintf("node %s: %s", f.Node, n.Message))
		}
		reason := fmt.Sprintf("node %s (%s rank %d) failed with exit code %d", f.Node, f.Role, f.Rank, code)
		// Whether it is charged is decided when the stop phase ends: a
		// member lost meanwhile explains it.
		d = stopNext(v, d, now, now, reason, p.Restarts, aliveExcludedList(&p, ix))
		d.plan.Failure = &membership.Failure{Node: f.Node, Role: f.Role, Rank: f.Rank, ExitCode: code}
		return d
	}
	switch {
	case spec.SuccessPolicy == membership.SuccessRank0 && rank0Done:
		return finish(v, now, membership.JobSucceeded, 0, "rank 0 succeeded")
	case workers > 0 && workersDone == workers:
		return finish(v, now, membership.JobSucceeded, 0, allOf(workers, "worker", "succeeded"))
	}

	// Once a worker has finished, the job is finishing: new nodes wait.
	t, short, same := ix.ranksFor(v.spec, v.plan, aliveExcluded(&p, ix))
	if short == nil && workersDone == 0 && !same {
		if settling(&d, &spec, t.workers, tm, now) {
			d.status = runningStatus(v, p, ready, now)
			d.status.Message = fmt.Sprintf("%s available; restarting at that size when the %s settle window ends", english.Count(t.workers, "worker"), tm.settle)
			return d
		}
		detected := now
		if !d.memo.pendingSince.IsZero() {
			detected = d.memo.pendingSince
		}
		d.memo.pendingSince = time.Time{}
		reason := fmt.Sprintf("membership change: %d → %s", countMembers(p.Members, membership.RoleWorker), english.Count(t.workers, "worker"))
		if spec.PS != countMembers(p.Members, membership.RolePS) {
			reason += fmt.Sprintf(", %d → %d ps", countMembers(p.Members, membership.RolePS), spec.PS)
		}
		return stopNext(v, d, now, detected, reason, p.Restarts, aliveExcludedList(&p, ix))
	}
	d.memo.pendingSince = time.Time{}
	d.status = runningStatus(v, p, ready, now)
	if workersDone > 0 {
		d.status.Message = fmt.Sprintf("%d of %s succeeded; waiting for the rest", workersDone, english.Count(workers, "worker"))
	} else if short != nil {
		d.status.Message = fmt.Sprintf("np %s: %s; generation %d keeps running", spec.Workers(), short, p.Generation)
	}
	if d.status.Phase == membership.JobRunning && (v.status == nil || v.status.Phase != membership.JobRunning || v.status.Generation != p.Generation) {
		d.events = append(d.events, membership.Event{Generation: p.Generation, Type: "GenerationRunning", Members: len(p.Members), WorldSize: p.WorldSize,
			Message: fmt.Sprintf("%s, world size %d", allOf(len(p.Members), "member", "running"), p.WorldSize), Steps: d.status.Steps})
	}
	return d
}

// settling reports whether a run of the given number of workers must wait
// for the settle window: np is a range and its maximum is not reached.
func settling(d *decision, spec *membership.Spec, workers int, tm timing, now time.Time) bool {
	if np := spec.Workers(); !np.IsRange() || workers >= np.Max {
		return false
	}
	if d.memo.pendingSince.IsZero() {
		d.memo.pendingSince = now
	}
	if until := d.memo.pendingSince.Add(tm.settle); now.Before(until) {
		d.wakeAt = until
		return true
	}
	return false
}

// stopNext commits phase stop of the next generation: every member of the
// current table stops and acks.
func stopNext(v view, d decision, now, detected time.Time, reason string, restarts int, excluded []string) decision {
	p := *v.plan
	next := membership.Plan{
		Generation: p.Generation + 1, Phase: membership.PhaseStop, Members: p.Members, Table: p.Table,
		Restarts: restarts, MaxRestarts: v.spec.MaxRestarts, Reason: reason, Excluded: excluded, DetectedAt: detected, StopAt: now,
	}
	d.plan = &next
	d.memo.stopGen, d.memo.stopSeen, d.memo.evicted = next.Generation, now, nil
	d.status = planStatus(v, next, membership.JobRestarting, 0, stoppingMessage(next))
	d.events = append(d.events, membership.Event{Generation: next.Generation, Type: "GenerationStopping", Message: reason})
	return d
}

// finish commits the last plan of a job: every sidecar stops and exits.
func finish(v view, now time.Time, result membership.JobPhase, exitCode int, reason string) decision {
	next := membership.Plan{Generation: 1, Phase: membership.PhaseStop, Result: result, ExitCode: exitCode,
		Reason: reason, DetectedAt: now, StopAt: now}
	if v.plan != nil {
		next.Generation = v.plan.Generation + 1
		next.Members, next.Table, next.Restarts = v.plan.Members, v.plan.Table, v.plan.Restarts
	} else if v.status != nil {
		next.Generation = v.status.Generation + 1
	}
	d := decision{plan: &next}
	d.status = finalStatus(v, next)
	d.events = []membership.Event{{Generation: next.Generation, Type: "Job" + string(result), Message: reason}}
	return d
}

func finalStatus(v view, p membership.Plan) *membership.Status {
	s := planStatus(v, p, p.Result, 0, p.Reason)
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
	s := &membership.Status{Phase: phase, Ready: ready, Message: msg, Generation: p.Generation, Restarts: p.Restarts}
	if v.spec != nil {
		s.NP = v.spec.Workers()
	}
	if p.Phase == membership.PhaseRun {
		s.Members, s.WorldSize = len(p.Members), p.WorldSize
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
	x.Steps, y.Steps = nil, nil
	return x == y
}

// aliveExcluded is the plan's excluded set, without nodes that left.
func aliveExcluded(p *membership.Plan, ix *nodeIndex) map[string]bool {
	out := map[string]bool{}
	for _, id := range aliveExcludedList(p, ix) {
		out[id] = true
	}
	return out
}

func aliveExcludedList(p *membership.Plan, ix *nodeIndex) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, id := range p.Excluded {
		if _, ok := ix.lookup(id); ok {
			out = append(out, id)
		}
	}
	return out
}

func appendUnique(list []string, id string) []string {
	for _, x := range list {
		if x == id {
			return list
		}
	}
	return append(list, id)
}

func countMembers(members []membership.Member, role membership.Role) int {
	n := 0
	for _, m := range members {
		if m.Role == role {
			n++
		}
	}
	return n
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
