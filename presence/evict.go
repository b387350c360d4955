package presence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// evictionSlack is how much longer than the node's TTL an eviction record
// lives; an eviction whose revocation comes later than half of it after
// the record's grant is given up and tried again.
const evictionSlack = 2 * time.Second

// EvictRequest says whom to evict and why.
type EvictRequest struct {
	Job   string
	Node  string
	Lease clientv3.LeaseID
	// By and Reason are recorded.
	By, Reason string
	// If are further conditions of the write, such as the coordinator's
	// election fence; Then further writes that go with it, such as an
	// event.
	If   []clientv3.Cmp
	Then []clientv3.Op
	// StoppedForSure skips the record: whoever evicts knows that the
	// node's processes are gone (Kubernetes reports its containers
	// terminated).
	StoppedForSure bool
}

// ErrEvictionMoot is returned by Evict when the node's record is no longer
// under the lease, or a condition of the request does not hold: there was
// nothing to evict.
var ErrEvictionMoot = errors.New("presence: nothing to evict")

// Evict revokes a node's lease so that the job moves on without waiting for
// it to expire, and leaves an eviction record that outlives the node's own
// fence deadline, unless req.StoppedForSure. A lease already gone counts as
// evicted.
func Evict(ctx context.Context, cli *clientv3.Client, keys membership.Keys, req EvictRequest) error {
	nodeKey := keys.Node(req.Job, req.Node)
	conds := append([]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(nodeKey), "=", req.Lease)}, req.If...)
	ops := append([]clientv3.Op(nil), req.Then...)
	var granted time.Time
	if !req.StoppedForSure {
		tl, err := cli.TimeToLive(ctx, req.Lease)
		if err != nil {
			return fmt.Errorf("evict node %s: %w", req.Node, err)
		}
		if tl.TTL <= 0 && tl.GrantedTTL <= 0 {
			return nil // expired: the node fenced itself before etcd let it go
		}
		ttl := max(tl.GrantedTTL, 1)
		granted = time.Now()
		grant, err := cli.Grant(ctx, ttl+int64(evictionSlack/time.Second))
		if err != nil {
			return fmt.Errorf("evict node %s: grant the record's lease: %w", req.Node, err)
		}
		rec := membership.Eviction{Node: req.Node, Lease: int64(req.Lease), TTLSeconds: ttl, By: req.By, Reason: req.Reason, At: granted.UTC()}
		val, err := membership.Encode(rec)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(keys.Eviction(req.Job, req.Node, int64(req.Lease)), val, clientv3.WithLease(grant.ID)))
	}
	resp, err := cli.Txn(ctx).If(conds...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("evict node %s: %w", req.Node, err)
	}
	if !resp.Succeeded {
		return ErrEvictionMoot
	}
	if !req.StoppedForSure && time.Since(granted) > evictionSlack/2 {
		// The record might expire before the node's deadline: do not
		// revoke now; its record expires and the next attempt starts over.
		return fmt.Errorf("evict node %s: etcd too slow to revoke safely; will retry", req.Node)
	}
	// Bounded: a revocation held up by a lost quorum would hold up the
	// caller, who meanwhile sees nothing, not even the node revoking the
	// lease itself when it registers again. The record stands; the next
	// attempt finds the lease gone, or the node registered anew.
	revokeCtx, cancel := context.WithTimeout(ctx, evictionSlack/2)
	defer cancel()
	if _, err := cli.Revoke(revokeCtx, req.Lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("evict node %s: revoke: %w", req.Node, err)
	}
	return nil
}
