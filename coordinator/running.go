package coordinator

import (
	"fmt"
	"sort"
	"time"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/membership"
)

// decideRunning watches a generation in phase run: lost members, failed or
// succeeded children, and changes of membership or spec.
func decideRunning(v view, d decision, lim limits, now time.Time) decision {
	p := *v.plan
	ix := v.index()
	pr := v.progress()
	spec := *v.spec

	if spec.Suspend {
		// Gracefully, as for a change of membership: the trainers get
		// their stop signal and the sidecars keep their checkpoints.
		return stopNext(v, d, now, now, reasonSuspended, false, aliveExcludedList(&p, ix))
	}
	// A member lost or leaving is a membership change, whatever the fault
	// tolerance: the budget and the fault tolerance level are for failures.
	if len(pr.lost) > 0 {
		reason := fmt.Sprintf("%s lost", nodeList("member", sortedIDs(pr.lost)))
		return stopNext(v, d, now, now, reason, true, aliveExcludedList(&p, ix))
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
		d = stopNext(v, d, now, now, reason, true, aliveExcludedList(&p, ix))
		d.plan.Failure = &membership.Failure{Node: f.Node, Role: f.Role, Rank: f.Rank, ExitCode: code}
		return d
	}
	if hd, ok := decideHang(v, d, now); ok {
		return hd
	}
	switch {
	case spec.SuccessPolicy == membership.SuccessRank0 && rank0Done:
		return finish(v, now, membership.JobSucceeded, 0, "rank 0 succeeded")
	case workers > 0 && workersDone == workers:
		return finish(v, now, membership.JobSucceeded, 0, allOf(workers, "worker", "succeeded"))
	}

	// Once a worker has finished, the job is finishing: new nodes wait.
	t, short, same := ranksFor(v, &d.memo, aliveExcluded(&p, ix))
	if short == nil && workersDone == 0 && !same {
		if settling(&d, &spec, t.workers, lim, now, ix) {
			d.status = runningStatus(v, p, ready, now)
			d.status.Message = fmt.Sprintf("%s available; restarting at that size when the %s settle window ends", english.Count(t.workers, "worker"), lim.settle)
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
		return stopNext(v, d, now, detected, reason, false, aliveExcludedList(&p, ix))
	}
	d.memo.pendingSince = time.Time{}
	d.status = runningStatus(v, p, ready, now)
	if workersDone > 0 {
		d.status.Message = fmt.Sprintf("%d of %s succeeded; waiting for the rest", workersDone, english.Count(workers, "worker"))
	} else if short != nil {
		d.status.Message = fmt.Sprintf("np %s: %s; generation %d keeps running", spec.Workers(), short, p.Generation)
	}
	if d.status.Phase == membership.JobRunning && (v.status == nil || v.status.Phase != membership.JobRunning || v.status.Generation != p.Generation) {
		msg := fmt.Sprintf("%s, world size %d", allOf(len(p.Members), "member", "running"), p.WorldSize)
		if began := beganText(p, ix); began != "" {
			msg += "; " + began
		}
		d.events = append(d.events, membership.Event{Generation: p.Generation, Type: "GenerationRunning", Members: len(p.Members), WorldSize: p.WorldSize,
			Message: msg, Steps: d.status.Steps})
	}
	return d
}

// settling reports whether a run of the given number of workers must wait
// for the settle window: np is a range and its maximum is not reached. A
// job that is smaller because a node's trainer is still starting ahead
// (Starting) does not wait: that node comes later, and the job grows then.
func settling(d *decision, spec *membership.Spec, workers int, lim limits, now time.Time, ix *nodeIndex) bool {
	if np := spec.Workers(); !np.IsRange() || workers >= np.Max || ix.startingAside(spec) {
		return false
	}
	if d.memo.pendingSince.IsZero() {
		d.memo.pendingSince = now
	}
	if until := d.memo.pendingSince.Add(lim.settle); now.Before(until) {
		d.wakeAt = until
		return true
	}
	return false
}

// stopNext commits phase stop of the next generation: every member of the
// current table stops and acks. A fault (a member failed or lost) counts
// as an interruption; a change of membership or spec does not.
func stopNext(v view, d decision, now, detected time.Time, reason string, fault bool, excluded []string) decision {
	p := *v.plan
	next := membership.Plan{
		Generation: p.Generation + 1, Phase: membership.PhaseStop, Members: p.Members, Table: p.Table,
		Restarts: p.Restarts, MaxRestarts: v.spec.MaxRestarts, Interruptions: p.Interruptions,
		Reason: reason, Excluded: excluded, DetectedAt: detected, StopAt: now,
		HangRestarts: p.HangRestarts, MaxHangRestarts: v.spec.MaxHangRestarts, Hangs: p.Hangs, Watch: p.Watch,
	}
	if fault {
		next.Interruptions++
	}
	d.plan = &next
	d.memo.stopGen, d.memo.stopSeen, d.memo.evicted = next.Generation, now, nil
	d.status = planStatus(v, next, membership.JobRestarting, 0, stoppingMessage(next))
	d.events = append(d.events, membership.Event{Generation: next.Generation, Type: "GenerationStopping", Message: reason})
	return d
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
