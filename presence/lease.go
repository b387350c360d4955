package presence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// register grants a new lease and creates the record under it. The record
// is created only if no other lease holds it: a record under a lease that
// is not renewed is waited for until it expires; one still renewed after
// its TTL belongs to a live sidecar, and ErrNodeTaken is returned. old, if
// set, is this registration's previous lease, revoked first: its processes
// are gone.
func (r *Registration) register(ctx context.Context, old clientv3.LeaseID) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	if old != 0 {
		// Best effort: a record left under it expires with it anyway.
		revokeCtx, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = r.cfg.Client.Revoke(revokeCtx, old)
		cancel()
		// A new registration has started nothing, whatever was written
		// meanwhile.
		r.mu.Lock()
		r.record.State, r.record.Generation, r.record.ExitCode, r.record.Message = membership.NodeWaiting, 0, 0, ""
		r.record.LeaseLosses = r.losses.Load()
		// Its start-up was over long ago: a wait for it now is not one.
		r.record.Started = time.Time{}
		r.mu.Unlock()
	}
	lease, fenceAt, err := r.grant(ctx)
	// An etcd that answers, but late (thousands of nodes registering at
	// once), is asked again: a lease with little of its TTL left is worth
	// nothing, but the next grant may come sooner.
	for try := 1; errors.Is(err, errGrantLate) && try < grantTries && ctx.Err() == nil; try++ {
		r.logger.Debug("lease granted too late; granting another", "try", try)
		lease, fenceAt, err = r.grant(ctx)
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	record := r.record
	r.mu.Unlock()
	if fenceAt, err = r.create(ctx, lease, fenceAt, old, record); err != nil {
		// The lease expires by itself; revoking is only tidier.
		revokeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, _ = r.cfg.Client.Revoke(revokeCtx, lease)
		cancel()
		return err
	}
	// Creating may have waited for a dead sidecar's record to expire.
	fenceAt = r.refresh(ctx, lease, fenceAt)
	r.mu.Lock()
	r.lease, r.fenceAt = lease, fenceAt
	r.mu.Unlock()
	r.cfg.OnDeadline(lease, fenceAt)
	return nil
}

// isBusy reports etcd's refusal of a request while it is behind applying
// what it committed: a load to wait out, not a failure.
func isBusy(err error) bool {
	return err != nil && errors.Is(err, rpctypes.ErrTooManyRequests)
}

// newBusyBackoff paces the retries of a request etcd refused as too many.
func newBusyBackoff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errGrantLate: a lease was granted, but its renewal came too late to
// leave it most of its TTL.
var errGrantLate = errors.New("grant lease: etcd answered too late to renew the new lease")

// grantTries bounds the grants of one registration when each comes late.
const grantTries = 5

// grant grants a lease and returns its fence time. The deadline counts from
// when the grant was sent, so a grant that took long (etcd was catching up
// after an outage) is renewed at once, before anything is written under
// it: a new registration starts with most of its TTL ahead of it.
func (r *Registration) grant(ctx context.Context) (clientv3.LeaseID, time.Time, error) {
	sent := time.Now()
	resp, err := r.cfg.Client.Grant(ctx, int64(r.cfg.TTL/time.Second))
	for busy := newBusyBackoff(); isBusy(err); {
		if err := sleepCtx(ctx, busy.NextBackOff()); err != nil {
			return 0, time.Time{}, err
		}
		sent = time.Now()
		resp, err = r.cfg.Client.Grant(ctx, int64(r.cfg.TTL/time.Second))
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("grant lease: %w", err)
	}
	fenceAt := r.refresh(ctx, resp.ID, r.fenceTime(sent, resp.TTL))
	if time.Until(fenceAt) < r.cfg.TTL/2 {
		revokeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, _ = r.cfg.Client.Revoke(revokeCtx, resp.ID)
		cancel()
		return 0, time.Time{}, errGrantLate
	}
	return resp.ID, fenceAt, nil
}

// refresh renews a lease that nothing depends on yet while its fence time
// is less than half a TTL away, and returns the fence time it reached.
func (r *Registration) refresh(ctx context.Context, lease clientv3.LeaseID, fenceAt time.Time) time.Time {
	for range 3 {
		if time.Until(fenceAt) >= r.cfg.TTL/2 {
			break
		}
		sent := time.Now()
		callCtx, cancel := context.WithTimeout(ctx, r.cfg.TTL/3)
		ka, err := r.cfg.Client.KeepAliveOnce(callCtx, lease)
		cancel()
		if err == nil && ka.TTL > 0 {
			fenceAt = r.fenceTime(sent, ka.TTL)
		}
	}
	return fenceAt
}

// fenceTime is when a lease renewed (or granted) at sent for ttl seconds
// must be considered lost: the server cannot expire it before sent+ttl.
func (r *Registration) fenceTime(sent time.Time, ttl int64) time.Time {
	return sent.Add(time.Duration(ttl)*time.Second - r.cfg.FenceMargin)
}

// create writes the record under lease if no other lease holds the key,
// waiting for a record left by a dead sidecar to expire. A record under old,
// this registration's previous lease, is revoked instead: its processes are
// gone, and it may outlive its TTL by far when etcd lost its quorum (a new
// leader extends every lease), keeping the node out of the job for nothing.
// The wait can outlast the new lease's TTL (a dead sidecar's of a longer
// one): the lease is renewed meanwhile, as nothing depends on it yet, and
// create returns its fence time.
func (r *Registration) create(ctx context.Context, lease clientv3.LeaseID, fenceAt time.Time, old clientv3.LeaseID, record membership.Node) (time.Time, error) {
	value, err := membership.Encode(record)
	if err != nil {
		return fenceAt, err
	}
	var waitedFor clientv3.LeaseID
	var waitUntil time.Time
	busy := newBusyBackoff()
	for {
		resp, err := r.cfg.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(r.key), "=", 0)).
			Then(clientv3.OpPut(r.key, value, clientv3.WithLease(lease))).
			Else(clientv3.OpGet(r.key)).
			Commit()
		if isBusy(err) {
			// etcd is behind applying (thousands of nodes registering
			// at once): ask again, keeping the new lease alive.
			if err := sleepCtx(ctx, busy.NextBackOff()); err != nil {
				return fenceAt, err
			}
			fenceAt = r.refresh(ctx, lease, fenceAt)
			continue
		}
		if err != nil {
			return fenceAt, fmt.Errorf("create node record: %w", err)
		}
		if resp.Succeeded {
			return fenceAt, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // gone in between
		}
		holder, rev := clientv3.LeaseID(kvs[0].Lease), kvs[0].ModRevision
		if holder == 0 {
			// No sidecar's: a record is always written under a lease.
			// Someone's hand or script put it there; it is replaced.
			resp, err := r.cfg.Client.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(r.key), "=", rev)).
				Then(clientv3.OpPut(r.key, value, clientv3.WithLease(lease))).
				Commit()
			if err != nil {
				return fenceAt, fmt.Errorf("replace a node record under no lease: %w", err)
			}
			if resp.Succeeded {
				r.logger.Warn("replaced a node record that no lease held", "revision", rev)
				return fenceAt, nil
			}
			continue
		}
		if old != 0 && holder == old {
			if _, err := r.cfg.Client.Revoke(ctx, old); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return fenceAt, fmt.Errorf("revoke the previous lease: %w", err)
			}
			continue
		}
		if holder != waitedFor {
			// Wait for the other lease's TTL and a second: if it is still
			// there after that, its sidecar is renewing it.
			ttl := r.cfg.TTL
			if tl, err := r.cfg.Client.TimeToLive(ctx, holder); err == nil && tl.GrantedTTL > 0 {
				ttl = time.Duration(tl.GrantedTTL) * time.Second
			}
			waitedFor, waitUntil = holder, time.Now().Add(ttl+time.Second)
			r.logger.Warn("the node's record is held under another lease; waiting for it to expire", "lease", fmt.Sprintf("%x", holder))
		}
		if !time.Now().Before(waitUntil) {
			return fenceAt, fmt.Errorf("%w: node %s of job %s is registered by another sidecar that is alive (lease %x is still renewed); give this node another --node-id",
				ErrNodeTaken, record.ID, r.cfg.Job, holder)
		}
		until := waitUntil
		if renewBy := fenceAt.Add(-r.cfg.TTL / 2); renewBy.Before(until) {
			until = renewBy
		}
		if err := r.waitGone(ctx, rev, until); err != nil {
			return fenceAt, err
		}
		fenceAt = r.refresh(ctx, lease, fenceAt)
	}
}

// waitGone waits until the key changes after rev, or until is reached.
func (r *Registration) waitGone(ctx context.Context, rev int64, until time.Time) error {
	wctx, cancel := context.WithDeadline(clientv3.WithRequireLeader(ctx), until)
	defer cancel()
	for resp := range r.cfg.Client.Watch(wctx, r.key, clientv3.WithRev(rev+1)) {
		if resp.Err() != nil || len(resp.Events) > 0 {
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

func (r *Registration) put(ctx context.Context, lease clientv3.LeaseID, record membership.Node) error {
	value, err := membership.Encode(record)
	if err != nil {
		return err
	}
	if _, err := r.cfg.Client.Put(ctx, r.key, value, clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("put node record: %w", err)
	}
	return nil
}
