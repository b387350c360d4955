package presence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// Lease TTL bounds of a node record.
const (
	DefaultTTL = 5 * time.Second
	MinTTL     = 2 * time.Second
	// MinFenceMargin is the least time between a node fencing itself and
	// the earliest moment etcd may expire its lease.
	MinFenceMargin = 250 * time.Millisecond
)

// ErrNotRegistered is returned by Registration.Update while the node has no
// live lease; the update is kept and written when the node registers again.
var ErrNotRegistered = errors.New("presence: node not registered")

// ErrNodeTaken is returned when another sidecar, alive, holds the node's
// record: two sidecars must never run one node.
var ErrNodeTaken = errors.New("presence: node id taken")

// Place is where a node is present, and how long its presence lasts
// unrenewed: the etcd it registers in, the key schema, the job, the node's
// record and its lease's timing. The sidecar's configuration carries one.
type Place struct {
	Client *clientv3.Client
	Keys   membership.Keys
	Job    string
	// Node is the first record to write; Node.ID names the key.
	Node membership.Node
	// TTL of the lease, whole seconds; DefaultTTL if zero, at least MinTTL.
	TTL time.Duration
	// FenceMargin is how long before the earliest possible expiry of the
	// lease the node fences itself; a tenth of the TTL if zero, and never
	// less than MinFenceMargin.
	FenceMargin time.Duration
}

// RegistrationConfig configures Register.
type RegistrationConfig struct {
	Place
	Logger hclog.Logger
	// OnDeadline is called with the lease and the time by which the node's
	// processes must be dead, each time it moves: at registration and after
	// each renewal. It must not block.
	OnDeadline func(lease clientv3.LeaseID, fenceAt time.Time)
	// OnLost is called when the lease is lost: its fence time passed
	// without a renewal, or it was revoked or not found. The node must have
	// no process left when it returns: the coordinator may start the next
	// generation without it from then on.
	OnLost func()
	// OnRegistered is called after the node registered again following a
	// loss, with the record it wrote.
	OnRegistered func(membership.Node)
	// OnRenewal, if set, is told of every renewal sent: how long etcd
	// took to answer, and its error. It must not block.
	OnRenewal func(latency time.Duration, err error)
}

func (c *RegistrationConfig) setDefaults() error {
	if c.Client == nil {
		return errors.New("registration: no etcd client")
	}
	if err := membership.ValidateJobID(c.Job); err != nil {
		return err
	}
	if c.Node.State == "" {
		c.Node.State = membership.NodeWaiting
	}
	if err := c.Node.Validate(); err != nil {
		return fmt.Errorf("registration: %w", err)
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.TTL < MinTTL {
		return fmt.Errorf("registration: lease ttl %s is below the minimum of %s", c.TTL, MinTTL)
	}
	c.TTL = time.Duration(math.Ceil(c.TTL.Seconds())) * time.Second
	if c.FenceMargin == 0 {
		c.FenceMargin = c.TTL / 10
	}
	c.FenceMargin = max(c.FenceMargin, MinFenceMargin)
	if c.FenceMargin >= c.TTL/2 {
		return fmt.Errorf("registration: fence margin %s must be below half the ttl %s", c.FenceMargin, c.TTL)
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.OnDeadline == nil {
		c.OnDeadline = func(clientv3.LeaseID, time.Time) {}
	}
	if c.OnLost == nil {
		c.OnLost = func() {}
	}
	if c.OnRegistered == nil {
		c.OnRegistered = func(membership.Node) {}
	}
	return nil
}

// Registration is a node's presence in etcd: its record under a lease that a
// goroutine keeps alive. Through transient errors and etcd restarts it
// retries with backoff. It fences the node (OnLost) at the lease's deadline
// minus a margin, measured from when the last successful renewal was sent,
// so that the node's processes are gone before etcd can expire the lease;
// then it registers again with a new lease.
type Registration struct {
	cfg    RegistrationConfig
	key    string
	logger hclog.Logger

	// writeMu orders the writes of the record, so that acks are never
	// reordered; it is held across the etcd call. mu guards the state
	// below and is never held across a call, so a blocked write cannot
	// delay the fence.
	writeMu sync.Mutex
	mu      sync.Mutex
	record  membership.Node
	lease   clientv3.LeaseID // 0 while lost
	fenceAt time.Time

	renewals atomic.Int64
	losses   atomic.Int64

	lost   chan clientv3.LeaseID // a lease seen gone by a write, or given up
	fatal  chan error            // the node cannot register again
	cancel context.CancelFunc
	done   chan struct{}
	stop   sync.Once
}

// Register grants a lease, writes the node record under it, and keeps it
// alive until Leave or Close. The first registration happens before Register
// returns, so an unreachable etcd, or another live sidecar holding the same
// node id (ErrNodeTaken), is reported here.
func Register(ctx context.Context, cfg RegistrationConfig) (*Registration, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r := &Registration{
		cfg:    cfg,
		key:    cfg.Keys.Node(cfg.Job, cfg.Node.ID),
		logger: cfg.Logger.Named("membership").With("job", cfg.Job, "node", cfg.Node.ID),
		record: cfg.Node,
		lost:   make(chan clientv3.LeaseID, 1),
		fatal:  make(chan error, 1),
		done:   make(chan struct{}),
	}
	if err := r.register(ctx, 0); err != nil {
		return nil, err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.run(loopCtx)
	return r, nil
}

// Key is the etcd key of the node record.
func (r *Registration) Key() string { return r.key }

// Record returns the last record written or queued.
func (r *Registration) Record() membership.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.record
}

// Lease returns the current lease, or 0 while the node is not registered.
func (r *Registration) Lease() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}

// Renewals counts the successful lease renewals.
func (r *Registration) Renewals() int64 { return r.renewals.Load() }

// Losses counts the times the lease was lost and the node fenced.
func (r *Registration) Losses() int64 { return r.losses.Load() }

// Fatal receives an error when the node cannot register again: another
// sidecar took its node id while this one was cut off.
func (r *Registration) Fatal() <-chan error { return r.fatal }

// GiveUp treats lease as lost, as when the node's processes were killed
// because its deadline passed: the node fences and registers again. A lease
// that is no longer current is ignored.
func (r *Registration) GiveUp(lease clientv3.LeaseID) {
	select {
	case r.lost <- lease:
	default:
	}
}

// Update changes the record with fn and writes it under the current lease.
// While the node is not registered, or once its fence time has passed, it
// returns ErrNotRegistered and keeps the change for the next registration.
func (r *Registration) Update(ctx context.Context, fn func(*membership.Node)) (membership.Node, error) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.Lock()
	next := r.record
	next.Ports = append([]int(nil), r.record.Ports...)
	fn(&next)
	next.ID = r.record.ID
	if err := next.Validate(); err != nil {
		prev := r.record
		r.mu.Unlock()
		return prev, fmt.Errorf("update node record: %w", err)
	}
	r.record = next
	lease, fenceAt := r.lease, r.fenceAt
	r.mu.Unlock()
	if lease == 0 || !time.Now().Before(fenceAt) {
		return next, ErrNotRegistered
	}
	// A write after the fence time would speak for processes that are gone.
	putCtx, cancel := context.WithDeadline(ctx, fenceAt)
	defer cancel()
	if err := r.put(putCtx, lease, next); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			r.GiveUp(lease)
			return next, ErrNotRegistered
		}
		return next, err
	}
	return next, nil
}

// Leave revokes the lease so that the node's record disappears at once, and
// stops the keepalive. Safe to call more than once.
func (r *Registration) Leave(ctx context.Context) error {
	r.Close()
	r.mu.Lock()
	lease := r.lease
	r.lease = 0
	r.mu.Unlock()
	if lease == 0 {
		return nil
	}
	if _, err := r.cfg.Client.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("revoke lease: %w", err)
	}
	return nil
}

// Close stops the keepalive without revoking: the record disappears when
// the lease expires, as if the node had crashed. Safe to call more than once.
func (r *Registration) Close() {
	r.stop.Do(func() {
		if r.cancel != nil {
			r.cancel()
			<-r.done
		}
	})
}

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
