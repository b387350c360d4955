package presence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// TakeoverRequest names the lease a node's previous sidecar held.
type TakeoverRequest struct {
	Job  string
	Node string
	// Lease is the predecessor's lease; TTL the longest it may have been
	// granted for (the record outlives an eviction record of it).
	Lease clientv3.LeaseID
	TTL   time.Duration
}

// TakeOver revokes the lease of a node's previous sidecar, so that the node
// can register again at once instead of waiting for the lease to expire.
// The caller must have killed every process that ran under that lease and
// seen none left: TakeOver first records that (membership.Takeover), which
// lets the coordinator count them dead even where it evicted the lease and
// would otherwise wait out the node's deadline, then revokes the lease,
// which deletes the node's record if the lease still holds it. A lease
// already gone is no error.
func TakeOver(ctx context.Context, cli *clientv3.Client, keys membership.Keys, req TakeoverRequest) error {
	if req.Lease == 0 {
		return errors.New("take over: no lease")
	}
	// An eviction record of the lease lives its TTL and evictionSlack
	// from its grant, which may come shortly before this: this one lives
	// twice that TTL, and as long as any TTL a sidecar takes.
	ttl := 2*max(req.TTL, DefaultTTL) + evictionSlack + time.Second
	grant, err := cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return fmt.Errorf("take over node %s: grant the record's lease: %w", req.Node, err)
	}
	val, err := membership.Encode(membership.Takeover{Node: req.Node, Lease: int64(req.Lease), Pid: os.Getpid(), At: time.Now().UTC()})
	if err != nil {
		return err
	}
	if _, err := cli.Put(ctx, keys.Takeover(req.Job, req.Node, int64(req.Lease)), val, clientv3.WithLease(grant.ID)); err != nil {
		return fmt.Errorf("take over node %s: %w", req.Node, err)
	}
	if _, err := cli.Revoke(ctx, req.Lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("take over node %s: revoke lease %x: %w", req.Node, int64(req.Lease), err)
	}
	return nil
}
