package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
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
	// malformed are the job's keys whose value does not decode, or is
	// invalid, by key. The last good value of each stands (the spec, the
	// plan, a node's record, an eviction) until a valid one replaces it;
	// what is wrong shows in the status, an event and a metric.
	malformed map[string]malformedRecord
	// planRecord is the plan's last good value as stored: put back over
	// a malformed plan.
	planRecord []byte
	// pending are events to write with the next decision.
	pending []membership.Event
	// relisted is what the actor held before a fresh listing (reset): a
	// key the listing shows malformed takes its value from here, so that
	// a watch broken by an etcd election forgets no last good value.
	relisted relistedState
	// goodTable is the last good snapshot of the plan's rank table, by
	// chunk, as stored: put back over a malformed chunk.
	goodTable    map[int][]byte
	goodTableRef membership.TableRef
	// lossesSeen is each node's lease-loss count when last seen; it
	// outlives the node's key, which a lease loss deletes.
	lossesSeen map[string]int64

	// Owned by the run goroutine.
	memo   memo
	retry  *backoff.ExponentialBackOff
	ledger ledger
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
		malformed: map[string]malformedRecord{},
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

// relistedState is the last good values held when a fresh listing began.
type relistedState struct {
	spec      *membership.Spec
	plan      *membership.Plan
	nodes     map[string]membership.LiveNode
	evictions map[evictionID]membership.Eviction
}

// reset forgets what etcd held, before a fresh listing is applied, but for
// the last good values a malformed key keeps (relisted).
func (a *jobActor) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.relisted = relistedState{spec: a.spec, plan: a.plan, nodes: map[string]membership.LiveNode{}, evictions: maps.Clone(a.evictions)}
	for _, n := range a.nodes.joinOrder() {
		a.relisted.nodes[n.ID] = n
	}
	clear(a.malformed)
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
		a.specRev = kv.ModRevision
		if kv.Deleted {
			a.spec, a.specErr = nil, nil
			a.noteValid(kv.Key)
			return
		}
		// A spec that does not decode, or asks for what cannot be (np 0),
		// changes nothing: the last good one stands.
		s, err := membership.DecodeSpec(kv.Value)
		a.noteInvalid(kv, jk.Kind, err)
		if err != nil {
			a.specErr = err
			if a.spec == nil {
				a.spec = a.relisted.spec
			}
			return
		}
		a.spec, a.specErr = &s, nil
	case membership.KindPlan:
		if kv.ModRevision <= a.planRev {
			return // our own write, already applied
		}
		a.planRev, a.planExists = kv.ModRevision, !kv.Deleted
		if kv.Deleted {
			a.plan, a.planErr, a.planRecord = nil, nil, nil
			a.noteValid(kv.Key)
			return
		}
		// A plan that does not decode changes nothing: the last good one
		// stands, and is put back (restorePlan).
		p, err := membership.DecodePlan(kv.Value)
		a.noteInvalid(kv, jk.Kind, err)
		if err != nil {
			if a.plan == nil && a.relisted.plan != nil {
				relisted := *a.relisted.plan
				a.plan = &relisted
			}
			if a.plan == nil {
				a.planErr = err
			}
			return
		}
		a.plan, a.planErr, a.planRecord = &p, nil, kv.Value
		if p.Table != nil { // its chunks come first, in the same transaction
			a.checkTableLocked(p.Table.Generation, kv.ModRevision)
		}
	case membership.KindStatus:
		if kv.ModRevision <= a.statusRev {
			return
		}
		a.statusRev, a.status = kv.ModRevision, nil
		if !kv.Deleted {
			// A malformed status is written over at the next decision.
			s, err := membership.DecodeStatus(kv.Value)
			a.status = ptrOrNil(s, err)
			a.noteInvalid(kv, jk.Kind, err)
		} else {
			a.noteValid(kv.Key)
		}
	case membership.KindNode:
		if kv.Deleted {
			a.nodes.remove(jk.Name)
			a.noteValid(kv.Key)
			return
		}
		n, err := membership.DecodeLiveNode(kv, jk.Name)
		if err == nil {
			a.nodes.put(n, now)
		} else if _, held := a.nodes.lookup(jk.Name); !held {
			if last, ok := a.relisted.nodes[jk.Name]; ok {
				a.nodes.put(last, now)
			}
		}
		// A malformed record over a node's: its last good one stands
		// while its lease lives (checkNodeLeases).
		a.noteInvalid(kv, jk.Kind, err)
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
			a.noteValid(kv.Key)
			return
		}
		e, err := membership.DecodeEviction(kv.Value)
		if err == nil && (e.Node != jk.Name || e.Lease != jk.Lease) {
			err = fmt.Errorf("%w: eviction of %s/%x under the key of %s/%x", membership.ErrInvalidRecord, e.Node, e.Lease, jk.Name, jk.Lease)
		}
		a.noteInvalid(kv, jk.Kind, err) // a good one before it stands: the fence waits on
		switch _, held := a.evictions[id]; {
		case err == nil:
			a.evictions[id] = e
		case held:
		case a.relisted.evictions[id].Lease != 0:
			a.evictions[id] = a.relisted.evictions[id]
		default:
			// Never seen good: its key still names whom and which lease.
			// Its TTL is unknown, so the longest is assumed.
			a.evictions[id] = membership.Eviction{Node: jk.Name, Lease: jk.Lease, TTLSeconds: malformedEvictionTTL,
				By: "unknown", Reason: "a malformed eviction record", At: now}
		}
	case membership.KindTakeover:
		id := evictionID{jk.Name, jk.Lease}
		if kv.Deleted {
			delete(a.takenOver, id)
			a.noteValid(kv.Key)
			return
		}
		t, err := membership.DecodeTakeover(kv.Value)
		if err == nil && (t.Node != jk.Name || t.Lease != jk.Lease) {
			err = fmt.Errorf("%w: takeover of %s/%x under the key of %s/%x", membership.ErrInvalidRecord, t.Node, t.Lease, jk.Name, jk.Lease)
		}
		a.noteInvalid(kv, jk.Kind, err)
		if err == nil {
			a.takenOver[id] = true
		}
	case membership.KindBridge, membership.KindAutoscaler:
		// Their owners' reports, which the coordinator does not act on:
		// only said when malformed.
		if kv.Deleted {
			a.noteValid(kv.Key)
			return
		}
		var err error
		if jk.Kind == membership.KindBridge {
			_, err = membership.DecodeBridgeStatus(kv.Value)
		} else {
			_, err = membership.DecodeAutoscalerStatus(kv.Value)
		}
		a.noteInvalid(kv, jk.Kind, err)
	case membership.KindTable:
		a.tables.Apply(jk, kv)
		a.checkTableLocked(jk.Generation, kv.ModRevision)
	case membership.KindEvent:
		if seq, err := strconv.ParseInt(jk.Name, 10, 64); err == nil && seq > a.lastSeq {
			a.lastSeq = seq
		}
	}
}

// malformedEvictionTTL is the TTL assumed of an evicted node whose eviction
// record is malformed and was never read good: an hour. The next
// generation waits that long after the lease is gone, unless the node is
// back under that lease, a takeover says its processes are dead, or a
// valid value or a delete replaces the record.
const malformedEvictionTTL = 3600

// malformedRecord is what is wrong with a key's value, of which revision.
type malformedRecord struct {
	kind membership.KeyKind
	err  error
	rev  int64
	said bool // in an event
}

// noteInvalid records a key's value as malformed (err) or, err nil, good
// again.
func (a *jobActor) noteInvalid(kv membership.KeyValue, kind membership.KeyKind, err error) {
	if err == nil {
		a.noteValid(kv.Key)
		return
	}
	if was, ok := a.malformed[kv.Key]; !ok || was.rev != kv.ModRevision {
		a.malformed[kv.Key] = malformedRecord{kind: kind, err: err, rev: kv.ModRevision}
	}
	if a.invalidLoggedAtRv[kv.Key] == kv.ModRevision {
		return
	}
	a.invalidLoggedAtRv[kv.Key] = kv.ModRevision
	a.t.c.metrics.invalid.Inc()
	a.logger.Warn("malformed record; the last good value stands", "key", kv.Key, "error", err)
}

// checkTableLocked checks the plan's rank table after a change of one of
// its chunks: one that no longer decodes is malformed (under the key of
// the job's tables), and put back (restoreTable). A table not whole yet,
// its chunks still arriving, is neither.
func (a *jobActor) checkTableLocked(gen, rev int64) {
	if a.plan == nil || a.plan.Table == nil || a.plan.Table.Generation != gen {
		return
	}
	ref := *a.plan.Table
	key := a.t.c.cfg.Keys.Tables(a.job)
	for i := range ref.Chunks {
		if _, ok := a.tables.Chunk(gen, i); !ok {
			return
		}
	}
	snapshot, err := a.tables.Snapshot(ref) // every chunk there: the wrong size is malformed
	if err == nil {
		_, err = membership.DecodeTableSnapshot(snapshot, ref.Digest)
	}
	a.noteInvalid(membership.KeyValue{Key: key, ModRevision: rev}, membership.KindTable, err)
	if err != nil {
		return
	}
	a.goodTable, a.goodTableRef = map[int][]byte{}, ref
	for i := range ref.Chunks {
		c, _ := a.tables.Chunk(gen, i)
		a.goodTable[i] = c
	}
}

// noteValid forgets that a key's value was malformed.
func (a *jobActor) noteValid(key string) { delete(a.malformed, key) }

// malformedSummary says what is malformed, a key's place under the job
// and its error, sorted: the status carries it.
func (a *jobActor) malformedSummary() string {
	prefix := a.t.c.cfg.Keys.Job(a.job)
	var parts []string
	for key, m := range a.malformed {
		parts = append(parts, fmt.Sprintf("%s: %v", strings.TrimPrefix(key, prefix), m.err))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
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
	if v.spec == nil && v.specErr != nil && a.status != nil && a.status.Spec != nil {
		// A leader new to a job whose spec is malformed: the last good
		// one is what the status says the job ran under.
		v.spec = a.status.Spec
	}
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
		if err := errors.Join(a.restorePlan(ctx), a.restoreTable(ctx)); errors.Is(err, errPlanMoved) {
			continue
		} else if err != nil {
			return time.Time{}, wrote, err
		}
		recheck := a.checkMalformedNodes(ctx)
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
		now := a.t.c.now()
		d := decide(v, a.memo, a.limits(), now)
		unacked := 0
		if v.plan != nil && v.plan.Phase == membership.PhaseStop {
			unacked = v.prog.present - v.prog.acked
		}
		said, drained := a.reportMalformedLocked(v, &d)
		if !d.deleteJob && d.err == nil {
			a.account(v, &d, now)
		}
		a.mu.Unlock()
		a.t.c.metrics.unacked.WithLabelValues(a.job).Set(float64(unacked))
		a.memo = d.memo
		if !recheck.IsZero() {
			wakeEarlier(&d, recheck)
		}
		if (d.err != nil || d.deleteJob) && len(drained) > 0 {
			a.mu.Lock()
			a.pending = append(drained, a.pending...)
			a.mu.Unlock()
		}
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
		if err != nil && len(drained) > 0 {
			a.mu.Lock()
			a.pending = append(drained, a.pending...) // said with the next decision
			a.mu.Unlock()
		}
		if errors.Is(err, errPlanMoved) {
			continue // decide again from the plan that is there
		}
		if err != nil {
			return time.Time{}, wrote, err
		}
		a.markSaid(said)
		a.observe()
		if d.plan == nil {
			return d.wakeAt, wrote, nil
		}
	}
	return time.Time{}, wrote, nil
}

// reportMalformedLocked makes the decision say what is malformed: in the
// status (written over if nothing else changes it), as an event once per
// malformed value, and in elastic_malformed_records. It returns the values
// its events say, to be marked once written.
func (a *jobActor) reportMalformedLocked(v view, d *decision) (said map[string]int64, drained []membership.Event) {
	summary := a.malformedSummary()
	switch {
	case d.status != nil:
		s := *d.status
		s.Malformed = summary
		d.status = &s
	case v.status != nil && v.status.Malformed != summary:
		s := *v.status
		s.Malformed = summary
		d.status = &s
	}
	var gen int64
	if v.plan != nil {
		gen = v.plan.Generation
	} else if v.status != nil {
		gen = v.status.Generation
	}
	drained, a.pending = a.pending, nil
	d.events = append(d.events, drained...)
	prefix := a.t.c.cfg.Keys.Job(a.job)
	said = map[string]int64{}
	counts := map[membership.KeyKind]int{}
	for key, m := range a.malformed {
		counts[m.kind]++
		if m.said {
			continue
		}
		said[key] = m.rev
		d.events = append(d.events, membership.Event{Generation: gen, Type: "MalformedRecord",
			Message: fmt.Sprintf("%s at revision %d: %v; the last good value stands", strings.TrimPrefix(key, prefix), m.rev, m.err)})
	}
	a.t.c.metrics.observeMalformed(a.job, counts)
	return said, drained
}

// markSaid notes that the events of these malformed values are written.
func (a *jobActor) markSaid(said map[string]int64) {
	if len(said) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, rev := range said {
		if m, ok := a.malformed[key]; ok && m.rev == rev {
			m.said = true
			a.malformed[key] = m
		}
	}
}

// restorePlan puts the last good plan back over a malformed one, if the
// malformed one is still there: the sidecars, which keep what they run
// while the plan cannot be read, see their plan again, and a coordinator
// that takes over finds it.
func (a *jobActor) restorePlan(ctx context.Context) error {
	keys := a.t.c.cfg.Keys
	key := keys.Plan(a.job)
	a.mu.Lock()
	m, bad := a.malformed[key]
	record, rev, plan := a.planRecord, a.planRev, a.plan
	a.mu.Unlock()
	if !bad || record == nil || plan == nil {
		return nil
	}
	resp, err := a.commitOnPlan(ctx, rev, clientv3.OpPut(key, string(record)))
	if err != nil {
		return fmt.Errorf("put the last good plan back: %w", err)
	}
	a.mu.Lock()
	if a.planRev == rev {
		a.planRev = resp.Header.Revision
		a.noteValid(key)
	}
	a.pending = append(a.pending, membership.Event{Generation: plan.Generation, Type: "PlanRestored",
		Message: fmt.Sprintf("the plan written at revision %d did not decode (%v); the last good plan, generation %d, is back", m.rev, m.err, plan.Generation)})
	a.mu.Unlock()
	a.logger.Warn("malformed plan replaced by the last good one", "generation", plan.Generation, "malformed_revision", m.rev)
	return nil
}

// restoreTable puts the last good chunks of the plan's rank table back
// over malformed ones, while the plan is the one they belong to.
func (a *jobActor) restoreTable(ctx context.Context) error {
	keys := a.t.c.cfg.Keys
	key := keys.Tables(a.job)
	a.mu.Lock()
	m, bad := a.malformed[key]
	good, ref, planRev := a.goodTable, a.goodTableRef, a.planRev
	current := a.plan != nil && a.plan.Table != nil && *a.plan.Table == ref
	a.mu.Unlock()
	if !bad || !current || len(good) != ref.Chunks {
		return nil
	}
	ops := make([]clientv3.Op, 0, len(good))
	for i := range ref.Chunks {
		ops = append(ops, clientv3.OpPut(keys.TableChunk(a.job, ref.Generation, i), string(good[i])))
	}
	if _, err := a.commitOnPlan(ctx, planRev, ops...); err != nil {
		return fmt.Errorf("put the last good rank table back: %w", err)
	}
	a.mu.Lock()
	if a.planRev == planRev {
		a.noteValid(key) // the echo of the chunks checks them again
	}
	a.pending = append(a.pending, membership.Event{Generation: ref.Generation, Type: "TableRestored",
		Message: fmt.Sprintf("a chunk of the rank table of generation %d was malformed (%v); the last good table is back", ref.Generation, m.err)})
	a.mu.Unlock()
	a.logger.Warn("malformed rank table replaced by the last good one", "generation", ref.Generation)
	return nil
}

// checkMalformedNodes keeps a node whose key holds a malformed value
// while the lease of its last good record lives, and drops it once that
// lease is gone: a value put without the lease outlives it, and would keep
// a dead node counted. A member of the running generation whose record
// was never read good (a leader that took over after the bad write) is
// kept, as running, while the lease the table names lives. It returns when
// to look again: while such a node is kept, every few seconds.
func (a *jobActor) checkMalformedNodes(ctx context.Context) time.Time {
	keys := a.t.c.cfg.Keys
	type check struct {
		lease  clientv3.LeaseID
		member *membership.Member // the node is not held: keep it as this member
		gen    int64
	}
	a.mu.Lock()
	checks := map[string]check{}
	for key, m := range a.malformed {
		if m.kind != membership.KindNode {
			continue
		}
		jk, ok := keys.ParseJobKey(key)
		if !ok {
			continue
		}
		if n, held := a.nodes.lookup(jk.Name); held {
			checks[jk.Name] = check{lease: n.Lease}
		} else if a.plan != nil && a.plan.Phase == membership.PhaseRun && !a.plan.Unresolved() {
			if mem, ok := a.plan.Member(jk.Name); ok {
				checks[jk.Name] = check{lease: clientv3.LeaseID(mem.Lease), member: &mem, gen: a.plan.Generation}
			}
		}
	}
	a.mu.Unlock()
	var again time.Time
	for id, c := range checks {
		askCtx, cancel := context.WithTimeout(ctx, time.Second)
		tl, err := a.t.c.cfg.Client.TimeToLive(askCtx, c.lease)
		cancel()
		alive := err == nil && tl.TTL > 0
		if err != nil || alive {
			again = time.Now().Add(malformedNodeRecheck)
		}
		a.mu.Lock()
		n, held := a.nodes.lookup(id)
		switch {
		case alive && !held && c.member != nil:
			m := c.member
			a.nodes.put(membership.LiveNode{Node: membership.Node{ID: id, Role: m.Role, Host: m.Host, Ports: m.Ports, NProc: m.NProc,
				State: membership.NodeRunning, Generation: c.gen}, Lease: c.lease}, a.t.c.now())
			a.logger.Info("node whose record is malformed kept as the member its lease says it is", "node", id)
		case err == nil && !alive && held && n.Lease == c.lease:
			a.nodes.remove(id)
			a.logger.Info("node whose record is malformed has lost its lease: gone", "node", id)
		}
		a.mu.Unlock()
	}
	return again
}

// malformedNodeRecheck is how often the lease of a node whose record is
// malformed is looked at.
const malformedNodeRecheck = 2 * time.Second

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
	m.goodput.set(a.job, a.ledger.g)
}
