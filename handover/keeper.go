package handover

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/launcher"
)

// Keeper keeps a sidecar's state file up to date. A new guard is written
// before the guard is used (Guard): a successor must know of every process
// that may run under a lease it revokes. A new lease is written in the
// background (Lease), as it is learnt on the lease's own renewal path,
// which must not wait for a disk: a file that names an earlier lease only
// makes the successor revoke a lease that is gone already, and wait for the
// current one to expire.
type Keeper struct {
	store  *Store
	logger hclog.Logger

	mu    sync.Mutex // held across a write, so writes follow each other
	state State
	// lease is the current lease, set without the lock: the renewal path
	// must not wait for a write.
	lease atomic.Int64

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewKeeper keeps state in store, writing it at once.
func NewKeeper(store *Store, state State, logger hclog.Logger) *Keeper {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	k := &Keeper{store: store, state: state, logger: logger.Named("handover"),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	k.lease.Store(state.Lease)
	k.mu.Lock()
	k.writeLocked()
	k.mu.Unlock()
	go k.run()
	return k
}

// Discard is a Keeper that keeps nothing, for a sidecar without a usable
// state directory: its successor waits for its lease to expire.
func Discard() *Keeper { return &Keeper{} }

// Lease notes the sidecar's current lease; it is written soon. It does
// not block.
func (k *Keeper) Lease(lease int64) {
	if k.store == nil {
		return
	}
	if k.lease.Swap(lease) != lease {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

// Guard writes the sidecar's new guard before it is used; an error means
// the file may name another guard, and the guard must not be used. It is
// launcher.Config.OnGuard.
func (k *Keeper) Guard(g launcher.GuardInfo) error {
	if k.store == nil {
		return nil
	}
	p, _ := guard.ReadProc(g.Pid) // a child that exited: its start time is 0, and it matches nothing
	k.mu.Lock()
	defer k.mu.Unlock()
	k.state.Guard = &Guard{Pid: g.Pid, Start: p.Start, Marker: g.Marker, Cgroup: g.Cgroup}
	return k.writeLocked()
}

func (k *Keeper) writeLocked() error {
	k.state.Lease, k.state.UpdatedAt = k.lease.Load(), time.Now().UTC()
	err := k.store.Write(k.state)
	if err != nil {
		k.logger.Error("state file not written", "path", k.store.Path(), "error", err)
	}
	return err
}

func (k *Keeper) run() {
	defer close(k.done)
	for {
		select {
		case <-k.stop:
			return
		case <-k.wake:
			k.mu.Lock()
			_ = k.writeLocked()
			k.mu.Unlock()
		}
	}
}

// Close stops the background writes. With remove it deletes the file: the
// sidecar ends leaving nothing running, and its lease revoked or let go.
// The lock is released either way. Safe to call twice.
func (k *Keeper) Close(remove bool) {
	if k.store == nil {
		return
	}
	k.once.Do(func() {
		close(k.stop)
		<-k.done
		if remove {
			k.store.Remove()
		}
		k.store.Close()
	})
}
