package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// term is one period of leadership. It follows every job's keys with a
// single watch and hands each job's changes to that job's actor.
type term struct {
	c *Coordinator
	// fence holds while this replica leads: the election key it created is
	// still there. Every write of the term is conditional on it.
	fence       clientv3.Cmp
	electionKey string
	electionRev int64
	cancel      context.CancelCauseFunc

	// jobs is touched only by the goroutine running Follow's handler.
	jobs map[string]*jobActor
	wg   sync.WaitGroup

	leaseMu      sync.Mutex
	eventLease   clientv3.LeaseID
	eventLeaseAt time.Time
}

func newTerm(c *Coordinator, electionKey string, electionRev int64) *term {
	return &term{
		c: c, fence: clientv3.Compare(clientv3.CreateRevision(electionKey), "=", electionRev),
		electionKey: electionKey, electionRev: electionRev, jobs: map[string]*jobActor{},
	}
}

// run leads until ctx ends or a fenced write finds the lead lost.
func (t *term) run(ctx context.Context) error {
	ctx, t.cancel = context.WithCancelCause(ctx)
	defer t.wg.Wait()
	defer t.cancel(nil)
	for _, task := range t.c.cfg.LeaderTasks {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.lead(ctx, task)
		}()
	}
	err := presence.Follow(ctx, t.c.cfg.Client, presence.Range{Key: t.c.cfg.Keys.Jobs(), Prefix: true}, t.c.logger,
		func(u presence.Update) error { return t.dispatch(ctx, u) })
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// stepDown ends the term because a fenced write failed.
func (t *term) stepDown(err error) { t.cancel(err) }

func (t *term) dispatch(ctx context.Context, u presence.Update) error {
	if u.Reset {
		for _, a := range t.jobs {
			a.reset()
		}
	}
	touched := map[*jobActor][]membership.KeyValue{}
	for _, kv := range u.Changes {
		jk, ok := t.c.cfg.Keys.ParseJobKey(kv.Key)
		if !ok {
			continue
		}
		a := t.jobs[jk.Job]
		if a == nil {
			a = newJobActor(t, jk.Job)
			t.jobs[jk.Job] = a
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				a.run(ctx)
			}()
		}
		touched[a] = append(touched[a], kv)
	}
	for a, changes := range touched {
		a.apply(changes)
	}
	if u.Reset {
		for _, a := range t.jobs {
			a.poke() // a job whose keys are all gone
		}
	}
	return nil
}

// eventLeaseID returns a lease for event records that expires between half
// the retention and the full retention from now, granting a new one when
// the current one is too old.
func (t *term) eventLeaseID(ctx context.Context) (clientv3.LeaseID, error) {
	t.leaseMu.Lock()
	defer t.leaseMu.Unlock()
	retention := t.c.cfg.EventRetention
	if t.eventLease != 0 && time.Since(t.eventLeaseAt) < retention/2 {
		return t.eventLease, nil
	}
	t.c.metrics.writes.Inc()
	grant, err := t.c.cfg.Client.Grant(ctx, int64(retention/time.Second))
	if err != nil {
		return 0, err
	}
	t.eventLease, t.eventLeaseAt = grant.ID, time.Now()
	return grant.ID, nil
}

// forgetEventLease drops a lease that etcd no longer knows.
func (t *term) forgetEventLease() {
	t.leaseMu.Lock()
	defer t.leaseMu.Unlock()
	t.eventLease = 0
}

// lead runs a leader task for the whole term, starting it again after a
// backoff when it fails.
func (t *term) lead(ctx context.Context, task LeaderTask) {
	retry := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(time.Second),
		backoff.WithMaxInterval(30*time.Second),
		backoff.WithMaxElapsedTime(0))
	for {
		err := task.Lead(presence.WithLeaderFence(ctx, t.fence))
		if ctx.Err() != nil {
			return
		}
		wait := retry.NextBackOff()
		t.c.logger.Error("leader task failed; starting it again", "task", fmt.Sprintf("%T", task), "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
