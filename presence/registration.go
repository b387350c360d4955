package presence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

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
	// ProcessesGone, if set, says whether every process of the node is
	// known dead (a kill that failed is not): the stop of a lost lease is
	// recorded (recordStopped) only then. Always, if nil.
	ProcessesGone func() bool
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

	lost chan clientv3.LeaseID // a lease seen gone by a write, or given up
	// unrecorded is a lease lost, its processes killed, whose stop is not
	// recorded yet (recordStopped); 0 if none. Guarded by mu.
	unrecorded clientv3.LeaseID
	fatal      chan error // the node cannot register again
	cancel     context.CancelFunc
	done       chan struct{}
	stop       sync.Once
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
		logger: cfg.Logger.Named("presence").With("job", cfg.Job, "node", cfg.Node.ID),
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

// Deadline returns the current lease and the time by which the node must
// act as fenced unless the lease is renewed again; lease 0 while the node
// is not registered.
func (r *Registration) Deadline() (clientv3.LeaseID, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease, r.fenceAt
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
// stops the keepalive. The caller has stopped every process of the node:
// where someone else revoked the lease first (an eviction, which leaves
// the coordinator waiting out the node's deadline), or the lease was lost
// before, Leave records that its processes are dead (recordStopped), so
// that nobody waits for them. Safe to call more than once.
func (r *Registration) Leave(ctx context.Context) error {
	r.Close()
	r.mu.Lock()
	lease, lost := r.lease, r.unrecorded
	r.lease, r.unrecorded = 0, 0
	r.mu.Unlock()
	var errs []error
	if lost != 0 && lost != lease {
		errs = append(errs, r.recordStopped(ctx, lost))
	}
	if lease != 0 {
		_, err := r.cfg.Client.Revoke(ctx, lease)
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			errs = append(errs, r.recordStopped(ctx, lease))
		case err != nil:
			errs = append(errs, fmt.Errorf("revoke lease: %w", err))
		}
	}
	return errors.Join(errs...)
}

// recordStopped records that the processes that ran under lease, which
// this node lost, are dead: a takeover of its own lease (TakeOver). An
// evicter that revoked the lease while the node ran left an eviction
// record, and the coordinator waits out the node's own deadline for it;
// the node, alive and with its processes stopped, can say so at once.
func (r *Registration) recordStopped(ctx context.Context, lease clientv3.LeaseID) error {
	if r.cfg.ProcessesGone != nil && !r.cfg.ProcessesGone() {
		return fmt.Errorf("the stop of lease %x is not recorded: the node's processes are not known dead", int64(lease))
	}
	err := TakeOver(ctx, r.cfg.Client, r.cfg.Keys, TakeoverRequest{Job: r.cfg.Job, Node: r.cfg.Node.ID, Lease: lease, TTL: r.cfg.TTL})
	if err != nil {
		return fmt.Errorf("record the stop of lease %x: %w", int64(lease), err)
	}
	r.logger.Debug("recorded the processes of a lost lease dead", "lease", fmt.Sprintf("%x", int64(lease)))
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
