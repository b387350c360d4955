package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// view is what the leader knows of one job, read from etcd, and what it
// measured of it on its own clock. A decision only reads it.
type view struct {
	job  string
	spec *membership.Spec
	// specErr says why the spec key's value is not taken: it does not
	// decode or is invalid. spec is then the last good one, if any.
	specErr error
	// specRev and planRev are the revisions of the spec and the plan
	// (planRev 0 when there is none): the decision's write is conditional
	// on planRev, and its memo of the rank table is keyed by both. A view
	// made by hand has none, and is never memoized.
	specRev int64
	planRev int64
	// idx holds the valid node records, indexed; a view made by hand
	// gives nodes instead (in join order), and index builds idx from them.
	idx   *nodeIndex
	nodes []membership.LiveNode
	plan  *membership.Plan
	// planErr says why no plan is known: the plan, or its rank table,
	// cannot be read, and no good one was seen before.
	planErr error
	// prog is the plan's progress, counted by the actor as acks arrive;
	// nil in a view made by hand, which counts it from the nodes.
	prog   *progress
	status *membership.Status
	// evictions are the eviction records: an evicted node's processes may
	// run until the record expires, or until a TTL after its lease was
	// seen gone.
	evictions []membership.Eviction
	// takenOver are the evictions whose processes the node's next sidecar
	// killed and saw gone before it revoked the lease itself (a takeover
	// record): they are fenced now, whatever their deadline.
	takenOver []evictionID
	// goneAt is, by evicted lease, when the leader revoked it or saw it
	// gone from etcd, on its own clock: the node renewed it last before
	// that. A lease not in it is still there, or not yet asked about.
	goneAt map[int64]time.Time
}

// fencing are the evictions whose processes may still run until their
// deadline: those not taken over.
func (v *view) fencing() []membership.Eviction {
	if len(v.takenOver) == 0 {
		return v.evictions
	}
	var out []membership.Eviction
	for _, e := range v.evictions {
		if !slices.Contains(v.takenOver, evictionID{e.Node, e.Lease}) {
			out = append(out, e)
		}
	}
	return out
}

// index is the view's node index.
func (v *view) index() *nodeIndex {
	if v.idx == nil {
		v.idx = indexOf(v.nodes)
	}
	return v.idx
}

// progress is the plan's progress: the actor's count, or, in a view made
// by hand, one from the nodes.
func (v *view) progress() *progress {
	if v.prog == nil {
		pr := countProgress(v.plan, v.index().nodes)
		v.prog = &pr
	}
	return v.prog
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
	// hangGen's first report of a hung rank was seen at hangSeen: its
	// peers' reports have hangSettle to arrive.
	hangGen  int64
	hangSeen time.Time
	// ranks is the last rank table computed, by what it was computed from:
	// thousands of acks change none of that, and cost no table.
	ranks ranksMemo
}

// limits are the protocol's time limits and the store's size limit.
type limits struct {
	settle      time.Duration
	stopTimeout time.Duration
	// retention is how long a finished job's keys are kept; 0 keeps them.
	retention time.Duration
	// tableChunkBytes is the most a stored rank table chunk holds
	// (membership.TableChunkBytes if 0); a table of more chunks than a
	// plan may name fails the job.
	tableChunkBytes int
}

// Fencing arithmetic: an evicted node kills its processes by its own
// deadline, within its lease's TTL after it last renewed the lease, which
// it did before the leader saw the lease gone; fenceMargin more covers
// SIGKILL taking effect. A lease not yet seen gone is asked about again
// after goneRecheck.
const (
	fenceMargin = time.Second
	goneRecheck = 250 * time.Millisecond
)

// fencedAt is when an evicted node's processes are certainly dead, on the
// leader's clock, given when its lease was seen gone.
func fencedAt(e membership.Eviction, gone time.Time) time.Time {
	return gone.Add(time.Duration(e.TTLSeconds)*time.Second + fenceMargin)
}

// decision is what to write for a job. The plan, status and events go into
// one transaction fenced on the leader's election key.
type decision struct {
	// deleteJob deletes every key of the finished job: its retention
	// is over.
	deleteJob bool
	plan      *membership.Plan
	// stored is plan as it is stored: its record and its rank table's
	// chunks.
	stored *membership.StoredPlan
	// tooLarge is why a plan's rank table could not be stored, when the
	// job fails for it.
	tooLarge error
	// err is a plan that could not be encoded at all; the actor retries.
	err    error
	status *membership.Status
	events []membership.Event // Seq and Time are filled in when written
	// accounted is how many of the ledger's spans the events carry.
	accounted int
	evict     []membership.LiveNode
	// wakeAt asks for another decision at that time even if nothing changes.
	wakeAt time.Time
	memo   memo
}

// decide computes the next step of a job's protocol. It is a pure function
// of its arguments, so every replica decides the same from the same etcd:
// it reads the view, changes nothing the actor holds, and returns the
// decision with the memo to pass to the next one. A plan it decides on is
// returned encoded; one whose rank table is too large to store fails the
// job instead.
func decide(v view, m memo, lim limits, now time.Time) decision {
	d := decideNext(v, m, lim, now)
	if d.plan != nil {
		d = seal(v, d, lim, now)
	}
	carrySpec(v, &d)
	// An eviction whose lease is not known gone yet is asked about again
	// soon: the actor asks etcd before each decision.
	for _, e := range v.fencing() {
		if _, ok := v.goneAt[e.Lease]; !ok {
			wakeEarlier(&d, now.Add(goneRecheck))
		}
	}
	return d
}

// seal encodes d's plan as it is stored. A rank table of more chunks than
// a plan may name cannot be stored by any retry: the job fails, saying why.
func seal(v view, d decision, lim limits, now time.Time) decision {
	stored, err := store(v, *d.plan, lim)
	if errors.Is(err, membership.ErrTableTooLarge) {
		f := finish(v, now, membership.JobFailed, 1, err.Error())
		f.tooLarge = err
		d, stored, err = f, nil, nil
		// The last plan keeps the table it ends: nothing new to store.
		stored, err = store(v, *d.plan, lim)
	}
	d.stored, d.err = stored, err
	if stored != nil {
		d.plan = &stored.Plan
	}
	return d
}

// store encodes plan p, which follows v's plan, as it is stored.
func store(v view, p membership.Plan, lim limits) (*membership.StoredPlan, error) {
	var current *membership.Table
	var currentRef *membership.TableRef
	if v.plan != nil {
		current, currentRef = v.plan.RankTable(), v.plan.Table
	}
	stored, err := membership.StorePlan(p, current, currentRef, lim.tableChunkBytes)
	if err != nil {
		return nil, err
	}
	return &stored, nil
}

// heldStatus is the status of a job held where it is: its phase and
// counts as last reported, Waiting if none, with msg.
func heldStatus(v view, msg string) *membership.Status {
	s := &membership.Status{Phase: membership.JobWaiting}
	if v.status != nil {
		c := *v.status
		s = &c
	}
	s.Message = msg
	return s
}

// wakeEarlier asks for a decision at at, unless one is asked for sooner.
func wakeEarlier(d *decision, at time.Time) {
	if d.wakeAt.IsZero() || at.Before(d.wakeAt) {
		d.wakeAt = at
	}
}

// decideNext is the protocol's next step, before it is encoded.
func decideNext(v view, m memo, lim limits, now time.Time) decision {
	d := decision{memo: m}
	switch {
	case v.plan != nil && v.plan.Final():
		ran := v.plan.Generation - 1
		if v.status != nil && v.status.Phase == v.plan.Result {
			ran = v.status.Generation
		}
		d.status = finalStatus(v, *v.plan, ran)
		expire(v, &d, lim, now)
		return d
	case v.spec != nil && v.spec.Cancel != "":
		return finish(v, now, membership.JobFailed, 1, "cancelled: "+v.spec.Cancel)
	case v.planErr != nil:
		// Whatever runs keeps running (the sidecars keep the last plan
		// they read); nothing is decided on a plan not known.
		d.status = heldStatus(v, fmt.Sprintf("the plan cannot be read (%v); waiting for a valid one, what runs keeps running", v.planErr))
		return d
	case v.spec == nil && v.specErr != nil:
		// A job whose only spec is malformed waits for a valid one.
		d.status = heldStatus(v, fmt.Sprintf("the spec is malformed (%v); waiting for a valid one", v.specErr))
		return d
	case v.spec == nil:
		// No spec: nothing to aim for. A job with nodes says so; a job
		// with neither spec nor plan (deleted) is left alone.
		if ix := v.index(); v.plan == nil && len(ix.nodes) > 0 {
			d.status = &membership.Status{Phase: membership.JobWaiting, Ready: ix.roles[membership.RoleWorker],
				Message: "waiting for a spec: set np with `coordinator scale` or a sidecar's --np"}
		}
		return d
	case v.plan == nil || v.plan.Phase == membership.PhaseStop:
		return decideStopped(v, d, lim, now)
	default:
		return decideRunning(v, d, lim, now)
	}
}

// expire deletes a finished job once its retention has passed since it
// ended, unless a Kubernetes resource runs it: that resource's deletion
// removes its keys, and its controller would otherwise write it again.
// A job whose node or eviction records remain is kept: their processes may
// still run, and a job created again under the same name must not start a
// generation beside them.
func expire(v view, d *decision, lim limits, now time.Time) {
	if lim.retention <= 0 || v.status == nil || !v.status.Phase.Done() || (v.spec != nil && v.spec.Owner != "") {
		return
	}
	if len(v.index().nodes) > 0 || len(v.evictions) > 0 {
		return // the watch brings their going
	}
	at := v.status.UpdatedAt.Add(lim.retention)
	if now.Before(at) {
		d.wakeAt = at
		return
	}
	d.deleteJob = true
}
