package membership

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
)

// Lease TTL bounds of a node record.
const (
	DefaultTTL = 5 * time.Second
	MinTTL     = 2 * time.Second
)

// ErrNotRegistered is returned by Registration.Update while the node has no
// live lease; the update is kept and written when the node registers again.
var ErrNotRegistered = errors.New("membership: node not registered")

// RegistrationConfig configures Register.
type RegistrationConfig struct {
	Client *clientv3.Client
	Keys   Keys
	Job    string
	// Node is the first record to write; Node.ID names the key.
	Node Node
	// TTL of the lease, whole seconds; DefaultTTL if zero, at least MinTTL.
	TTL    time.Duration
	Logger hclog.Logger
	// OnLost is called when the lease could not be renewed for a TTL, or
	// was revoked. The node must have no process left when it returns: the
	// coordinator may start the next generation without it from then on.
	OnLost func()
	// OnRegistered is called after the node registered again following a
	// loss, with the record it wrote.
	OnRegistered func(Node)
}

func (c *RegistrationConfig) setDefaults() error {
	if c.Client == nil {
		return errors.New("registration: no etcd client")
	}
	if err := ValidateJobID(c.Job); err != nil {
		return err
	}
	if c.Node.State == "" {
		c.Node.State = NodeWaiting
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
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.OnLost == nil {
		c.OnLost = func() {}
	}
	if c.OnRegistered == nil {
		c.OnRegistered = func(Node) {}
	}
	return nil
}

// Registration is a node's presence in etcd: its record under a lease that a
// goroutine keeps alive. Through transient errors and etcd restarts it
// retries with backoff; when the lease is lost it tells its owner (OnLost)
// and registers again with a new lease.
type Registration struct {
	cfg    RegistrationConfig
	key    string
	logger hclog.Logger

	// mu serialises writes of the record so that acks are never reordered.
	mu       sync.Mutex
	record   Node
	lease    clientv3.LeaseID // 0 while lost
	deadline time.Time        // when the lease may have expired on the server

	renewals atomic.Int64
	losses   atomic.Int64

	expired chan struct{} // an Update saw the lease gone
	cancel  context.CancelFunc
	done    chan struct{}
	stop    sync.Once
}

// Register grants a lease, writes the node record under it, and keeps it
// alive until Leave or Close. The first registration happens before Register
// returns, so an unreachable etcd is reported here.
func Register(ctx context.Context, cfg RegistrationConfig) (*Registration, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r := &Registration{
		cfg:     cfg,
		key:     cfg.Keys.Node(cfg.Job, cfg.Node.ID),
		logger:  cfg.Logger.Named("membership").With("job", cfg.Job, "node", cfg.Node.ID),
		record:  cfg.Node,
		expired: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	r.mu.Lock()
	err := r.registerLocked(ctx)
	r.mu.Unlock()
	if err != nil {
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
func (r *Registration) Record() Node {
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

// Update changes the record with fn and writes it under the current lease.
// While the node is not registered it returns ErrNotRegistered and keeps the
// change for the next registration.
func (r *Registration) Update(ctx context.Context, fn func(*Node)) (Node, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := r.record
	next.Ports = append([]int(nil), r.record.Ports...)
	fn(&next)
	next.ID = r.record.ID
	if err := next.Validate(); err != nil {
		return r.record, fmt.Errorf("update node record: %w", err)
	}
	r.record = next
	if r.lease == 0 {
		return next, ErrNotRegistered
	}
	if err := r.putLocked(ctx); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			select {
			case r.expired <- struct{}{}:
			default:
			}
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
		r.cancel()
		<-r.done
	})
}

// registerLocked grants a new lease and writes the record under it.
func (r *Registration) registerLocked(ctx context.Context) error {
	sent := time.Now()
	grant, err := r.cfg.Client.Grant(ctx, int64(r.cfg.TTL/time.Second))
	if err != nil {
		return fmt.Errorf("grant lease: %w", err)
	}
	r.lease = grant.ID
	r.deadline = sent.Add(time.Duration(grant.TTL) * time.Second)
	if err := r.putLocked(ctx); err != nil {
		r.lease = 0
		// The lease expires by itself; revoking is only tidier.
		revokeCtx, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = r.cfg.Client.Revoke(revokeCtx, grant.ID)
		cancel()
		return err
	}
	return nil
}

func (r *Registration) putLocked(ctx context.Context) error {
	value, err := Encode(r.record)
	if err != nil {
		return err
	}
	if _, err := r.cfg.Client.Put(ctx, r.key, value, clientv3.WithLease(r.lease)); err != nil {
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
		r.lease = 0
		r.mu.Unlock()
		r.losses.Add(1)
		r.logger.Warn("lease lost; fencing the node")
		r.cfg.OnLost()
		record, err := r.reregister(ctx)
		if err != nil {
			return // only when ctx is done
		}
		r.logger.Info("registered again", "lease", fmt.Sprintf("%x", r.Lease()))
		r.cfg.OnRegistered(record)
	}
}

// keepAlive renews the lease every TTL/3 and returns when ctx is done or the
// lease is lost: revoked, not found, or not renewed before its deadline. The
// deadline is measured from when a renewal was sent, so the node never
// believes in a lease the server has already let expire.
func (r *Registration) keepAlive(ctx context.Context) {
	r.mu.Lock()
	lease, deadline := r.lease, r.deadline
	r.mu.Unlock()
	select { // a signal about an earlier lease
	case <-r.expired:
	default:
	}

	interval := r.cfg.TTL / 3
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval = 50 * time.Millisecond
	retry.MaxInterval = interval / 2
	retry.MaxElapsedTime = 0

	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.expired:
			return
		case <-timer.C:
		}
		sent := time.Now()
		if !sent.Before(deadline) {
			return
		}
		callCtx, cancel := context.WithDeadline(ctx, deadline)
		resp, err := r.cfg.Client.KeepAliveOnce(callCtx, lease)
		cancel()
		switch {
		case err == nil:
			deadline = sent.Add(time.Duration(resp.TTL) * time.Second)
			r.mu.Lock()
			r.deadline = deadline
			r.mu.Unlock()
			r.renewals.Add(1)
			retry.Reset()
			timer.Reset(interval)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return
		case ctx.Err() != nil:
			return
		default:
			wait := retry.NextBackOff()
			r.logger.Debug("lease renewal failed; retrying", "error", err, "retry_in", wait)
			timer.Reset(wait)
		}
	}
}

// reregister grants a new lease and writes the record, retrying with backoff
// until it succeeds or ctx is done. The record says the node is waiting: it
// has started nothing under the new lease.
func (r *Registration) reregister(ctx context.Context) (Node, error) {
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval = 100 * time.Millisecond
	retry.MaxInterval = 2 * time.Second
	retry.MaxElapsedTime = 0
	var record Node
	err := backoff.Retry(func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.record.State = NodeWaiting
		r.record.Generation = 0
		r.record.ExitCode = 0
		r.record.Message = ""
		r.record.LeaseLosses = r.losses.Load()
		attemptCtx, cancel := context.WithTimeout(ctx, r.cfg.TTL)
		defer cancel()
		if err := r.registerLocked(attemptCtx); err != nil {
			if ctx.Err() != nil {
				return backoff.Permanent(ctx.Err())
			}
			r.logger.Debug("registration failed; retrying", "error", err)
			return err
		}
		record = r.record
		return nil
	}, backoff.WithContext(retry, ctx))
	return record, err
}
