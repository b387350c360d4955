package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

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
	now := a.t.c.now()
	var ops []clientv3.Op
	if d.plan != nil {
		stored := *d.stored
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
			a.t.c.goneLeases.set(a.job, int64(n.Lease), a.t.c.now())
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
		if _, err := a.commitOnPlan(ctx, planRev, put); err != nil {
			return nil, fmt.Errorf("store rank table chunk %d of %d: %w", i+1, len(stored.Chunks), err)
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

// commitOnPlan writes ops while this replica leads and the plan is still
// at planRev; otherwise it returns notCommitted's error (ErrNotLeader, or
// errPlanMoved with the actor holding the plan that is there).
func (a *jobActor) commitOnPlan(ctx context.Context, planRev int64, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	planKey := a.t.c.cfg.Keys.Plan(a.job)
	a.t.c.metrics.writes.Inc()
	resp, err := a.t.c.cfg.Client.Txn(ctx).
		If(a.t.fence, clientv3.Compare(clientv3.ModRevision(planKey), "=", planRev)).
		Then(ops...).
		Else(clientv3.OpGet(a.t.electionKey), clientv3.OpGet(planKey)).
		Commit()
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, a.notCommitted(resp)
	}
	return resp, nil
}

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
	a.applyLocked(jk, kv, a.t.c.now())
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
	keys := a.t.c.cfg.Keys
	if d.plan != nil && rev > a.planRev {
		p := *d.plan
		a.plan, a.planErr, a.planRev, a.planExists = &p, nil, rev, true
		a.planRecord = []byte(d.stored.Record)
		a.noteValid(keys.Plan(a.job))
		if p.Table != nil && len(d.stored.Chunks) == p.Table.Chunks {
			// The table just written is good: kept to be put back.
			a.goodTable, a.goodTableRef = map[int][]byte{}, *p.Table
			for i, c := range d.stored.Chunks {
				a.goodTable[i] = c
			}
		} else if p.Table != nil {
			a.checkTableLocked(p.Table.Generation, rev)
		}
		if t := p.RankTable(); t != nil {
			a.lastTable = t
			a.t.c.tables.Put(t)
		}
	}
	if status != nil && rev > a.statusRev {
		a.status, a.statusRev = status, rev
		a.noteValid(keys.Status(a.job))
	}
	if seq > a.lastSeq {
		a.lastSeq = seq
	}
	// The account's changes are in the events now: a later error (an
	// eviction's) must not have them written again.
	a.ledger.written(d.accounted)
}
