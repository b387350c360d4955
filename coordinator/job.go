package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// jobActor reconciles one job. The watch goroutine feeds it changes through
// apply; its own goroutine decides and writes, one decision at a time, so a
// burst of changes costs one decision, not one per change.
type jobActor struct {
	t      *term
	job    string
	logger hclog.Logger
	wake   chan struct{}

	mu sync.Mutex
	// What etcd holds, with the revision each record was last changed at.
	spec              *membership.Spec
	specErr           error
	plan              *membership.Plan
	planErr           error
	planExists        bool // the plan key exists (planRev is its ModRevision)
	status            *membership.Status
	specRev, planRev  int64
	statusRev         int64
	nodes             *nodeIndex
	evictions         map[evictionID]membership.Eviction
	takenOver         map[evictionID]bool
	tables            membership.StoredTables
	lastTable         *membership.Table // the table of the last plan resolved or written
	lastSeq           int64
	invalidLoggedAtRv map[string]int64
	// lossesSeen is each node's lease-loss count when last seen; it
	// outlives the node's key, which a lease loss deletes.
	lossesSeen map[string]int64

	// Owned by the run goroutine.
	memo  memo
	retry *backoff.ExponentialBackOff
}

func newJobActor(t *term, job string) *jobActor {
	retry := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(0))
	return &jobActor{
		t: t, job: job, logger: t.c.logger.With("job", job),
		wake: make(chan struct{}, 1), nodes: newNodeIndex(), evictions: map[evictionID]membership.Eviction{},
		takenOver: map[evictionID]bool{}, invalidLoggedAtRv: map[string]int64{}, lossesSeen: map[string]int64{}, retry: retry,
	}
}

// poke asks for a decision.
func (a *jobActor) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// evictionID names an eviction record: a node under one lease.
type evictionID struct {
	node  string
	lease int64
}

// reset forgets what etcd held, before a fresh listing is applied.
func (a *jobActor) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.spec, a.specErr, a.plan, a.planErr, a.status = nil, nil, nil, nil, nil
	a.specRev, a.planRev, a.statusRev, a.planExists = 0, 0, 0, false
	a.nodes.reset()
	clear(a.evictions)
	clear(a.takenOver)
	a.tables.Reset()
}

// apply records changes of the job's keys and asks for a decision.
func (a *jobActor) apply(changes []membership.KeyValue) {
	a.mu.Lock()
	now := a.t.c.now()
	for _, kv := range changes {
		jk, _ := a.t.c.cfg.Keys.ParseJobKey(kv.Key)
		a.applyLocked(jk, kv, now)
	}
	a.resolvePlanLocked()
	a.mu.Unlock()
	a.poke()
}

// resolvePlanLocked attaches the rank table the plan names, once the
// changes of a watch response are applied: the table's chunks come with
// the plan or before it. The previous plan's table is what a delta
// applies to.
func (a *jobActor) resolvePlanLocked() {
	if a.plan == nil || !a.plan.Unresolved() {
		return
	}
	src := membership.TableSource{Cache: a.t.c.tables, Fetch: a.tables.Snapshot}
	t, err := src.Resolve(*a.plan.Table, a.plan.Delta, a.lastTable)
	switch {
	case errors.Is(err, membership.ErrTableMissing):
		// Not here yet (a plan taken from a failed transaction's answer
		// comes before the watch brings its table): the actor reads it.
	case err != nil:
		a.plan, a.planErr = nil, fmt.Errorf("rank table: %w", err)
		a.logger.Warn("plan unreadable", "error", err)
	default:
		a.plan.AttachTable(t)
		a.lastTable = t
	}
}

// readPlanTable reads the table of a plan that names one the actor has not
// seen, at the plan's revision, and attaches it; an error is retried with
// the actor's backoff.
func (a *jobActor) readPlanTable(ctx context.Context) error {
	a.mu.Lock()
	p, rev := a.plan, a.planRev
	a.mu.Unlock()
	if p == nil || !p.Unresolved() {
		return nil
	}
	keys := a.t.c.cfg.Keys
	snapshot, err := membership.ReadTableSnapshot(ctx, a.t.c.cfg.Client, keys, a.job, *p.Table, rev)
	if err != nil {
		return fmt.Errorf("plan of revision %d: %w", rev, err)
	}
	t, err := membership.TableSource{Cache: a.t.c.tables, Fetch: func(membership.TableRef) ([]byte, error) { return snapshot, nil }}.
		Resolve(*p.Table, nil, nil)
	if err != nil {
		return fmt.Errorf("plan of revision %d: %w", rev, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.plan == p { // not replaced meanwhile
		a.plan.AttachTable(t)
		a.lastTable = t
	}
	return nil
}

func (a *jobActor) applyLocked(jk membership.JobKey, kv membership.KeyValue, now time.Time) {
	switch jk.Kind {
	case membership.KindSpec:
		if kv.ModRevision <= a.specRev {
			return
		}
		a.specRev, a.spec, a.specErr = kv.ModRevision, nil, nil
		if !kv.Deleted {
			s, err := membership.DecodeSpec(kv.Value)
			a.spec, a.specErr = ptrOrNil(s, err), err
			a.noteInvalid(kv, err)
		}
	case membership.KindPlan:
		if kv.ModRevision <= a.planRev {
			return // our own write, already applied
		}
		a.planRev, a.plan, a.planErr, a.planExists = kv.ModRevision, nil, nil, !kv.Deleted
		if !kv.Deleted {
			p, err := membership.DecodePlan(kv.Value)
			a.plan, a.planErr = ptrOrNil(p, err), err
			a.noteInvalid(kv, err)
		}
	case membership.KindStatus:
		if kv.ModRevision <= a.statusRev {
			return
		}
		a.statusRev, a.status = kv.ModRevision, nil
		if !kv.Deleted {
			// A malformed status is simply written over.
			s, err := membership.DecodeStatus(kv.Value)
			a.status = ptrOrNil(s, err)
		}
	case membership.KindNode:
		if kv.Deleted {
			a.nodes.remove(jk.Name)
			return
		}
		n, err := membership.DecodeLiveNode(kv, jk.Name)
		if err != nil {
			a.nodes.remove(jk.Name)
		} else {
			a.nodes.put(n, now)
		}
		a.noteInvalid(kv, err)
		if err == nil {
			if seen, ok := a.lossesSeen[n.ID]; ok && n.LeaseLosses > seen {
				a.t.c.metrics.leaseLosses.WithLabelValues(a.job).Add(float64(n.LeaseLosses - seen))
			}
			a.lossesSeen[n.ID] = n.LeaseLosses
		}
	case membership.KindEviction:
		id := evictionID{jk.Name, jk.Lease}
		if kv.Deleted {
			delete(a.evictions, id)
			return
		}
		e, err := membership.DecodeEviction(kv.Value)
		if err == nil && (e.Node != jk.Name || e.Lease != jk.Lease) {
			err = fmt.Errorf("%w: eviction of %s/%x under the key of %s/%x", membership.ErrInvalidRecord, e.Node, e.Lease, jk.Name, jk.Lease)
		}
		a.noteInvalid(kv, err)
		if err == nil {
			a.evictions[id] = e
		}
	case membership.KindTakeover:
		id := evictionID{jk.Name, jk.Lease}
		if kv.Deleted {
			delete(a.takenOver, id)
			return
		}
		t, err := membership.DecodeTakeover(kv.Value)
		if err == nil && (t.Node != jk.Name || t.Lease != jk.Lease) {
			err = fmt.Errorf("%w: takeover of %s/%x under the key of %s/%x", membership.ErrInvalidRecord, t.Node, t.Lease, jk.Name, jk.Lease)
		}
		a.noteInvalid(kv, err)
		if err == nil {
			a.takenOver[id] = true
		}
	case membership.KindTable:
		a.tables.Apply(jk, kv)
	case membership.KindEvent:
		if seq, err := strconv.ParseInt(jk.Name, 10, 64); err == nil && seq > a.lastSeq {
			a.lastSeq = seq
		}
	}
}

func (a *jobActor) noteInvalid(kv membership.KeyValue, err error) {
	if err == nil || a.invalidLoggedAtRv[kv.Key] == kv.ModRevision {
		return
	}
	a.invalidLoggedAtRv[kv.Key] = kv.ModRevision
	a.t.c.metrics.invalid.Inc()
	a.logger.Warn("malformed record", "key", kv.Key, "error", err)
}

func ptrOrNil[T any](v T, err error) *T {
	if err != nil {
		return nil
	}
	return &v
}

// viewLocked is the job as the actor holds it, with the progress of a plan
// whose table is resolved. Its index is the actor's own: a decision on it
// is made under the actor's lock, and only reads it.
func (a *jobActor) viewLocked() view {
	v := view{job: a.job, spec: a.spec, specErr: a.specErr, specRev: a.specRev, idx: a.nodes, plan: a.plan, planErr: a.planErr, status: a.status}
	if a.planExists {
		v.planRev = a.planRev
	}
	if a.plan == nil || !a.plan.Unresolved() {
		v.prog = a.nodes.progressOf(a.planRev, a.plan)
	}
	for id, e := range a.evictions {
		if a.takenOver[id] {
			v.takenOver = append(v.takenOver, id)
		}
		v.evictions = append(v.evictions, e)
	}
	return v
}

// decisionBatch is the least time after a decision that wrote nothing
// before the next: the changes that arrive meanwhile (thousands of acks)
// make one decision.
const decisionBatch = 5 * time.Millisecond

// run decides whenever the job changes or a deadline passes. After a failed
// write it waits out its backoff whatever happens meanwhile, so that its own
// writes, echoed by the watch, cannot make it loop.
func (a *jobActor) run(ctx context.Context) {
	a.t.c.metrics.seen(a.job)
	// Another replica reports the job's state once this one stops leading.
	defer a.t.c.metrics.forgetGauges(a.job)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var notBefore, batchUntil time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
		case <-timer.C:
		}
		until := notBefore
		if batchUntil.After(until) {
			until = batchUntil
		}
		if wait := time.Until(until); wait > 0 {
			timer.Stop()
			timer.Reset(wait)
			continue
		}
		wakeAt, wrote, err := a.reconcile(ctx)
		// A decision that changed nothing was an ack among thousands:
		// the next one waits for more of them. One that moved the job
		// on leaves the next free to follow at once.
		batchUntil = time.Time{}
		if !wrote {
			batchUntil = time.Now().Add(decisionBatch)
		}
		switch {
		case errors.Is(err, ErrNotLeader):
			a.t.stepDown(err)
			return
		case err != nil && ctx.Err() == nil:
			a.t.c.metrics.writeFails.Inc()
			wait := a.retry.NextBackOff()
			a.logger.Warn("reconcile failed; retrying", "error", err, "retry_in", wait)
			notBefore = time.Now().Add(wait)
			wakeAt = notBefore
		case err == nil:
			a.retry.Reset()
		}
		timer.Stop()
		if !wakeAt.IsZero() {
			timer.Reset(time.Until(wakeAt))
		}
	}
}

// reconcile decides and writes until a decision needs an outside change
// (an ack, a node) to go on, so that a stop phase no node must ack is
// followed by its run phase at once. It reports whether it wrote anything.
func (a *jobActor) reconcile(ctx context.Context) (wakeAt time.Time, wrote bool, err error) {
	for range 4 {
		if err := a.readPlanTable(ctx); err != nil {
			return time.Time{}, wrote, err
		}
		a.mu.Lock()
		if a.plan != nil && a.plan.Unresolved() {
			a.mu.Unlock()
			return time.Time{}, wrote, errors.New("the plan's rank table is not stored")
		}
		pre := a.viewLocked()
		a.mu.Unlock()
		goneAt := a.leasesGone(ctx, pre.fencing())
		a.mu.Lock()
		v := a.viewLocked()
		v.goneAt = goneAt
		d := decide(v, a.memo, a.limits(), a.t.c.now())
		unacked := 0
		if v.plan != nil && v.plan.Phase == membership.PhaseStop {
			unacked = v.prog.present - v.prog.acked
		}
		a.mu.Unlock()
		a.t.c.metrics.unacked.WithLabelValues(a.job).Set(float64(unacked))
		a.memo = d.memo
		if d.err != nil {
			return time.Time{}, wrote, d.err
		}
		if d.tooLarge != nil {
			a.logger.Error("rank table too large to store; the job fails", "error", d.tooLarge)
		}
		if d.deleteJob {
			err := a.deleteJob(ctx, v)
			if err == nil {
				a.t.c.metrics.forget(a.job)
			}
			return time.Time{}, true, err
		}
		wrote = wrote || d.plan != nil || len(d.events) > 0 || len(d.evict) > 0 || (d.status != nil && !sameStatus(d.status, v.status))
		err := a.write(ctx, v, d)
		if errors.Is(err, errPlanMoved) {
			continue // decide again from the plan that is there
		}
		if err != nil {
			return time.Time{}, wrote, err
		}
		a.observe()
		if d.plan == nil {
			return d.wakeAt, wrote, nil
		}
	}
	return time.Time{}, wrote, nil
}

// limits are the decisions' limits, from the coordinator's configuration.
func (a *jobActor) limits() limits {
	cfg := a.t.c.cfg
	return limits{settle: cfg.SettleWindow, stopTimeout: cfg.StopTimeout, retention: cfg.FinishedJobRetention, tableChunkBytes: cfg.TableChunkBytes}
}

// leasesGone returns, for each evicted lease that this process revoked or
// has seen gone from etcd (in this term or an earlier one), when it was
// gone on this process's clock; a decision counts the evicted node's
// deadline from there (fencedAt). A lease still there (the revocation
// follows the record) is left out, and the decision asks again shortly.
func (a *jobActor) leasesGone(ctx context.Context, evictions []membership.Eviction) map[int64]time.Time {
	gones := a.t.c.goneLeases
	if len(evictions) == 0 {
		gones.keep(a.job, nil)
		return nil
	}
	live := map[int64]bool{}
	goneAt := map[int64]time.Time{}
	for _, e := range evictions {
		live[e.Lease] = true
		gone, ok := gones.get(a.job, e.Lease)
		if !ok {
			askCtx, cancel := context.WithTimeout(ctx, time.Second)
			tl, err := a.t.c.cfg.Client.TimeToLive(askCtx, clientv3.LeaseID(e.Lease))
			cancel()
			if err != nil || tl.TTL != -1 {
				continue
			}
			gone = a.t.c.now()
			gones.set(a.job, e.Lease, gone)
		}
		goneAt[e.Lease] = gone
	}
	gones.keep(a.job, live)
	return goneAt
}

// observe sets the job's gauges from what the actor holds, or drops its
// series when nothing of the job is left.
func (a *jobActor) observe() {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.t.c.metrics
	if a.spec == nil && a.plan == nil && a.status == nil && len(a.nodes.nodes) == 0 {
		m.forget(a.job)
		return
	}
	m.seen(a.job)
	m.observeStatus(a.job, a.status, a.spec)
}
