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

// recordStoppedTimeout bounds the record of a lost lease's stop before the
// node registers again.
const recordStoppedTimeout = 2 * time.Second

func (r *Registration) run(ctx context.Context) {
	defer close(r.done)
	for {
		r.keepAlive(ctx)
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		old := r.lease
		r.lease = 0
		r.mu.Unlock()
		r.losses.Add(1)
		r.logger.Warn("lease lost; fencing the node")
		r.cfg.OnLost()
		// Nothing of the node runs now. Said at once, an evicter's wait
		// for the node's deadline ends; cut off from etcd, the node
		// tries again when it leaves.
		r.mu.Lock()
		r.unrecorded = old
		r.mu.Unlock()
		recordCtx, cancel := context.WithTimeout(ctx, recordStoppedTimeout)
		if err := r.recordStopped(recordCtx, old); err != nil {
			r.logger.Debug("stop not recorded", "error", err)
		} else {
			r.mu.Lock()
			if r.unrecorded == old {
				r.unrecorded = 0
			}
			r.mu.Unlock()
		}
		cancel()
		record, err := r.reregister(ctx, old)
		if errors.Is(err, ErrNodeTaken) {
			r.logger.Error("cannot register again", "error", err)
			r.fatal <- err
			return
		}
		if err != nil {
			return // only when ctx is done
		}
		r.logger.Info("registered again", "lease", fmt.Sprintf("%x", r.Lease()))
		r.cfg.OnRegistered(record)
	}
}

// keepAlive renews the lease every TTL/3 and returns when ctx is done or the
// lease is lost: revoked, not found, given up, or not renewed before its
// fence time. The fence has a timer of its own, so that neither a renewal
// retrying with backoff nor a blocked write can delay it.
func (r *Registration) keepAlive(ctx context.Context) {
	r.mu.Lock()
	lease, fenceAt := r.lease, r.fenceAt
	r.mu.Unlock()
	interval := r.cfg.TTL / 3
	retry := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(interval/2),
		backoff.WithMaxElapsedTime(0))

	fence := time.NewTimer(time.Until(fenceAt))
	defer fence.Stop()
	// Renewals are scheduled from when the last successful one was sent.
	lastSent := fenceAt.Add(r.cfg.FenceMargin - r.cfg.TTL)
	renew := time.NewTimer(time.Until(lastSent.Add(interval)))
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case l := <-r.lost:
			if l == lease {
				return
			}
			continue // about an earlier lease
		case <-fence.C:
			return
		case <-renew.C:
		}
		sent := time.Now()
		if !sent.Before(fenceAt) {
			return
		}
		callCtx, cancel := context.WithDeadline(ctx, fenceAt)
		resp, err := r.cfg.Client.KeepAliveOnce(callCtx, lease)
		cancel()
		if r.cfg.OnRenewal != nil && ctx.Err() == nil {
			r.cfg.OnRenewal(time.Since(sent), err)
		}
		switch {
		case err == nil && resp.TTL > 0:
			fenceAt = r.fenceTime(sent, resp.TTL)
			r.mu.Lock()
			r.fenceAt = fenceAt
			r.mu.Unlock()
			r.cfg.OnDeadline(lease, fenceAt)
			r.renewals.Add(1)
			retry.Reset()
			fence.Reset(time.Until(fenceAt))
			renew.Reset(time.Until(sent.Add(interval)))
		case err == nil, errors.Is(err, rpctypes.ErrLeaseNotFound):
			return
		case ctx.Err() != nil:
			return
		default:
			wait := retry.NextBackOff()
			r.logger.Debug("lease renewal failed; retrying", "error", err, "retry_in", wait)
			renew.Reset(wait)
		}
	}
}

// reregister registers the node again with a new lease, retrying with
// backoff until it succeeds, ctx is done or another sidecar holds the node.
// The record says the node is waiting: it has started nothing under the new
// lease.
func (r *Registration) reregister(ctx context.Context, old clientv3.LeaseID) (membership.Node, error) {
	retry := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(0))
	err := backoff.Retry(func() error {
		attemptCtx, cancel := context.WithTimeout(ctx, r.cfg.TTL+2*time.Second)
		defer cancel()
		err := r.register(attemptCtx, old)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrNodeTaken):
			return backoff.Permanent(err)
		case ctx.Err() != nil:
			return backoff.Permanent(ctx.Err())
		}
		r.logger.Debug("registration failed; retrying", "error", err)
		return err
	}, backoff.WithContext(retry, ctx))
	return r.Record(), err
}
