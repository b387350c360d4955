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
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
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
		invalidLoggedAtRv: map[string]int64{}, lossesSeen: map[string]int64{}, retry: retry,
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
	a.tables.Reset()
}

// apply records changes of the job's keys and asks for a decision.
func (a *jobActor) apply(changes []membership.KeyValue) {
	a.mu.Lock()
	now := time.Now()
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

// viewLocked is the job as the actor holds it. Its index is the actor's
// own: a decision on it is made under the actor's lock.
func (a *jobActor) viewLocked() view {
	v := view{job: a.job, spec: a.spec, specErr: a.specErr, idx: a.nodes, plan: a.plan, planErr: a.planErr, status: a.status}
	if a.planExists {
		v.planRev = a.planRev
	}
	for _, e := range a.evictions {
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
		evictions := a.viewLocked().evictions
		a.mu.Unlock()
		fencedAt, recheck := a.fenceEvictions(ctx, evictions)
		a.mu.Lock()
		v := a.viewLocked()
		v.fencedAt = fencedAt
		d := decide(v, a.memo, timing{settle: a.t.c.cfg.SettleWindow, stopTimeout: a.t.c.cfg.StopTimeout, retention: a.t.c.cfg.FinishedJobRetention}, time.Now())
		unacked := 0
		if v.plan != nil && v.plan.Phase == membership.PhaseStop {
			pr := a.nodes.progressOf(v.plan)
			unacked = pr.present - pr.acked
		}
		a.mu.Unlock()
		a.t.c.metrics.unacked.WithLabelValues(a.job).Set(float64(unacked))
		if !recheck.IsZero() && (d.wakeAt.IsZero() || recheck.Before(d.wakeAt)) {
			d.wakeAt = recheck
		}
		a.memo = d.memo
		if d.deleteJob {
			err := a.deleteJob(ctx, v)
			if err == nil {
				a.t.c.metrics.forget(a.job)
			}
			return time.Time{}, true, err
		}
		wrote = wrote || d.plan != nil || len(d.events) > 0 || len(d.evict) > 0 || (d.status != nil && !sameStatus(d.status, v.status))
		err := a.write(ctx, v, d)
		if errors.Is(err, membership.ErrTableTooLarge) {
			// No retry can store it: the job fails, saying why.
			a.logger.Error("rank table too large to store; the job fails", "error", err)
			err = a.write(ctx, v, finish(v, time.Now(), membership.JobFailed, 1, err.Error()))
		}
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

// fenceEvictions returns, for each evicted lease that this process
// revoked or has seen gone from etcd (in this term or an earlier one), the
// time by which the evicted node has killed its processes, on this
// process's clock. The node renewed the lease last before
// it was gone, so its own deadline falls within a TTL of that; a second more
// covers SIGKILL taking effect. A lease still there (the revocation follows
// the record) is asked about again shortly: the time returned, if not zero.
func (a *jobActor) fenceEvictions(ctx context.Context, evictions []membership.Eviction) (fencedAt map[int64]time.Time, recheck time.Time) {
	gones := a.t.c.goneLeases
	if len(evictions) == 0 {
		gones.keep(a.job, nil)
		return nil, time.Time{}
	}
	live := map[int64]bool{}
	fencedAt = map[int64]time.Time{}
	for _, e := range evictions {
		live[e.Lease] = true
		gone, ok := gones.get(a.job, e.Lease)
		if !ok {
			askCtx, cancel := context.WithTimeout(ctx, time.Second)
			tl, err := a.t.c.cfg.Client.TimeToLive(askCtx, clientv3.LeaseID(e.Lease))
			cancel()
			if err != nil || tl.TTL != -1 {
				recheck = time.Now().Add(250 * time.Millisecond)
				continue
			}
			gone = time.Now()
			gones.set(a.job, e.Lease, gone)
		}
		fencedAt[e.Lease] = gone.Add(time.Duration(e.TTLSeconds)*time.Second + time.Second)
	}
	gones.keep(a.job, live)
	return fencedAt, recheck
}

// errPlanMoved: the plan changed since the decision read it; the actor now
// holds the new one and decides again.
var errPlanMoved = errors.New("coordinator: the plan changed under the decision")

// maxEventsPerJob bounds a job's timeline: older events are deleted as new
// ones are written.
const maxEventsPerJob = 1000

// write commits a decision: plan, status and events in one transaction
// fenced on the election key and on the plan the decision was based on, so
// that a decision never replaces a plan it did not see (one written by a
// transaction that succeeded but was reported lost, say). Then the
// evictions.
func (a *jobActor) write(ctx context.Context, v view, d decision) error {
	keys := a.t.c.cfg.Keys
	now := time.Now()
	var ops []clientv3.Op
	if d.plan != nil {
		var current *membership.Table
		var currentRef *membership.TableRef
		if v.plan != nil {
			current, currentRef = v.plan.RankTable(), v.plan.Table
		}
		stored, err := membership.StorePlan(*d.plan, current, currentRef, a.t.c.cfg.TableChunkBytes)
		if err != nil {
			return err
		}
		tableOps, err := a.tableOps(ctx, v.planRev, stored)
		if err != nil {
			return err
		}
		d.plan = &stored.Plan
		ops = append(tableOps, clientv3.OpPut(keys.Plan(a.job), stored.Record))
	}
	var status *membership.Status
	if d.status != nil && !sameStatus(d.status, v.status) {
		s := *d.status
		s.UpdatedAt = now
		status = &s
		val, err := membership.Encode(status)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(keys.Status(a.job), val))
	}
	a.mu.Lock()
	seq := a.lastSeq
	a.mu.Unlock()
	if len(d.events) > 0 {
		lease, err := a.t.eventLeaseID(ctx)
		if err != nil {
			return fmt.Errorf("grant event lease: %w", err)
		}
		for _, e := range d.events {
			seq++
			e.Seq, e.Time = seq, now
			val, err := membership.Encode(e)
			if err != nil {
				return err
			}
			ops = append(ops, clientv3.OpPut(keys.Event(a.job, seq), val, clientv3.WithLease(lease)))
			a.logger.Info("event", "type", e.Type, "generation", e.Generation, "message", e.Message)
		}
		if seq > maxEventsPerJob {
			ops = append(ops, clientv3.OpDelete(keys.Event(a.job, 0), clientv3.WithRange(keys.Event(a.job, seq-maxEventsPerJob+1))))
		}
	}
	if len(ops) > 0 {
		if a.logger.IsDebug() {
			a.logger.Debug("commit", "plan", d.plan != nil, "status", status, "events", len(d.events))
		}
		a.t.c.metrics.writes.Inc()
		planKey := keys.Plan(a.job)
		began := time.Now()
		resp, err := a.t.c.cfg.Client.Txn(ctx).
			If(a.t.fence, clientv3.Compare(clientv3.ModRevision(planKey), "=", v.planRev)).
			Then(ops...).
			Else(clientv3.OpGet(a.t.electionKey), clientv3.OpGet(planKey)).
			Commit()
		a.t.c.metrics.commitTime.Observe(time.Since(began).Seconds())
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			a.t.forgetEventLease() // someone revoked it; the retry grants another
		}
		if err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		if !resp.Succeeded {
			return a.notCommitted(resp)
		}
		a.committed(resp.Header.Revision, v, d, status, seq)
	}
	if len(d.evict) == 0 {
		return nil
	}
	return a.evict(ctx, v.plan.Generation, d.evict)
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

// deleteJob deletes every key of a finished job whose retention is over,
// if its plan is still the one the decision saw.
func (a *jobActor) deleteJob(ctx context.Context, v view) error {
	keys := a.t.c.cfg.Keys
	a.t.c.metrics.writes.Inc()
	resp, err := a.t.c.cfg.Client.Txn(ctx).
		If(a.t.fence, clientv3.Compare(clientv3.ModRevision(keys.Plan(a.job)), "=", v.planRev),
			membership.NoKeysUnder(keys.Nodes(a.job)), membership.NoKeysUnder(keys.Evictions(a.job))).
		Then(clientv3.OpDelete(keys.Job(a.job), clientv3.WithPrefix())).
		Else(clientv3.OpGet(a.t.electionKey)).
		Commit()
	if err != nil {
		return fmt.Errorf("delete finished job: %w", err)
	}
	if !resp.Succeeded {
		if election := resp.Responses[0].GetResponseRange().Kvs; len(election) == 0 || election[0].CreateRevision != a.t.electionRev {
			return ErrNotLeader
		}
		return nil // the plan changed: the watch brings it, and a decision
	}
	a.logger.Info("deleted a finished job: its retention is over", "retention", a.t.c.cfg.FinishedJobRetention)
	return nil
}

// evictParallelism bounds the evictions in flight: each is a few requests
// (the lease's TTL, a lease for the record, the record, the revocation).
const evictParallelism = 16

// evict evicts nodes that did not ack a stop, several at a time. Each
// eviction is its own small transaction; the first error is returned, and
// the next decision evicts what is left.
func (a *jobActor) evict(ctx context.Context, gen int64, nodes []membership.LiveNode) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		slots    = make(chan struct{}, evictParallelism)
	)
	for _, n := range nodes {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			a.t.c.metrics.writes.Inc()
			err := presence.Evict(ctx, a.t.c.cfg.Client, a.t.c.cfg.Keys, presence.EvictRequest{
				Job: a.job, Node: n.ID, Lease: n.Lease, By: "coordinator", If: []clientv3.Cmp{a.t.fence},
				Reason: fmt.Sprintf("did not ack the stop of generation %d in time", gen),
			})
			switch {
			case errors.Is(err, presence.ErrEvictionMoot):
				return // the node left, or re-registered, meanwhile
			case err != nil:
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			// Revoked by now: the node's last renewal came before this
			// moment, which the wait can count from without asking etcd,
			// which may be unreachable when it asks.
			a.t.c.goneLeases.set(a.job, int64(n.Lease), time.Now())
			a.t.c.metrics.evictions.WithLabelValues(a.job).Inc()
			a.logger.Warn("evicted node", "node", n.ID)
		}()
	}
	wg.Wait()
	return firstErr
}

// tableOps are the operations that store a new plan's rank table with the
// plan and delete the tables before it. A table of one chunk goes into the
// plan's transaction; a larger one is written first, chunk by chunk, each
// write fenced on the lead: until the plan names them, no one reads them.
func (a *jobActor) tableOps(ctx context.Context, planRev int64, stored membership.StoredPlan) ([]clientv3.Op, error) {
	if len(stored.Chunks) == 0 {
		return nil, nil
	}
	keys := a.t.c.cfg.Keys
	ref := stored.Plan.Table
	var ops []clientv3.Op
	inline := len(stored.Chunks) == 1 && len(stored.Chunks[0])+len(stored.Record) <= maxInlineTable
	for i, c := range stored.Chunks {
		put := clientv3.OpPut(keys.TableChunk(a.job, ref.Generation, i), string(c))
		if inline {
			ops = append(ops, put)
			break
		}
		// Conditional like the plan's own write: a decision made on a
		// plan that has moved since must not write over the chunks of
		// the table the new plan names.
		a.t.c.metrics.writes.Inc()
		planKey := keys.Plan(a.job)
		resp, err := a.t.c.cfg.Client.Txn(ctx).
			If(a.t.fence, clientv3.Compare(clientv3.ModRevision(planKey), "=", planRev)).
			Then(put).
			Else(clientv3.OpGet(a.t.electionKey), clientv3.OpGet(planKey)).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("store rank table chunk %d of %d: %w", i+1, len(stored.Chunks), err)
		}
		if !resp.Succeeded {
			return nil, a.notCommitted(resp)
		}
	}
	// Every other table, and chunks left by an attempt at this generation
	// that stored more of them, go.
	tables := keys.Tables(a.job)
	return append(ops,
		clientv3.OpDelete(tables, clientv3.WithRange(keys.TableGeneration(a.job, ref.Generation))),
		clientv3.OpDelete(keys.TableChunk(a.job, ref.Generation, ref.Chunks), clientv3.WithRange(clientv3.GetPrefixRangeEnd(tables))),
	), nil
}

// maxInlineTable is the largest table chunk written in the plan's own
// transaction, with the plan record, status and events: etcd refuses a
// request over 1.5 MiB. A larger one is written before it.
const maxInlineTable = 1 << 20

// notCommitted says why a decision's transaction failed: the lead is lost,
// or the plan moved, which the actor then takes from the answer.
func (a *jobActor) notCommitted(resp *clientv3.TxnResponse) error {
	election := resp.Responses[0].GetResponseRange().Kvs
	if len(election) == 0 || election[0].CreateRevision != a.t.electionRev {
		return ErrNotLeader
	}
	key := a.t.c.cfg.Keys.Plan(a.job)
	kv := membership.KeyValue{Key: key, Deleted: true, ModRevision: resp.Header.Revision}
	if plans := resp.Responses[1].GetResponseRange().Kvs; len(plans) > 0 {
		p := plans[0]
		kv = membership.KeyValue{Key: key, Value: p.Value, CreateRevision: p.CreateRevision, ModRevision: p.ModRevision}
	}
	a.mu.Lock()
	jk, _ := a.t.c.cfg.Keys.ParseJobKey(key)
	a.applyLocked(jk, kv, time.Now())
	a.resolvePlanLocked()
	a.mu.Unlock()
	a.logger.Info("the plan changed under a decision; deciding again", "revision", kv.ModRevision)
	return errPlanMoved
}

// committed applies our own writes at once, so the next decision does not
// wait for the watch to echo them back, and counts them in the metrics. The
// metrics compare with v, what the decision saw: the echo may already have
// updated the actor.
func (a *jobActor) committed(rev int64, v view, d decision, status *membership.Status, seq int64) {
	m := a.t.c.metrics
	if d.plan != nil {
		if d.plan.Phase == membership.PhaseRun {
			m.generations.WithLabelValues(a.job).Inc()
		}
		if v.plan != nil && d.plan.Restarts > v.plan.Restarts {
			m.restarts.WithLabelValues(a.job).Inc()
		}
	}
	if status != nil && status.Steps != nil && (v.status == nil || v.status.Steps == nil || *v.status.Steps != *status.Steps) {
		m.observeSteps(a.job, status.Steps)
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if d.plan != nil && rev > a.planRev {
		p := *d.plan
		a.plan, a.planErr, a.planRev, a.planExists = &p, nil, rev, true
		if t := p.RankTable(); t != nil {
			a.lastTable = t
			a.t.c.tables.Put(t)
		}
	}
	if status != nil && rev > a.statusRev {
		a.status, a.statusRev = status, rev
	}
	if seq > a.lastSeq {
		a.lastSeq = seq
	}
}
