package handover

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/launcher"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// ErrPredecessorRunning is returned by Assess when the sidecar that wrote
// the state still runs.
var ErrPredecessorRunning = errors.New("handover: the node's previous sidecar is still running")

// Assess decides what a sidecar whose own State is here (its ids, boot,
// pid namespace and process) may do with the state its predecessor left:
// take the node back (nil), or not, saying why (an error wrapping
// ErrPredecessorRunning when the predecessor still runs; any other error
// means the file is not to be trusted, and is ignored).
func Assess(prev, here State) error {
	switch {
	case prev.Cluster != here.Cluster || prev.Prefix != here.Prefix:
		return errors.New("it was written for another etcd or key prefix")
	case prev.Job != here.Job || prev.Node != here.Node:
		return fmt.Errorf("it is of job %s node %s", prev.Job, prev.Node)
	case prev.Boot != here.Boot:
		return errors.New("it was written before the machine booted, or on another machine")
	case prev.Lease == 0:
		return errors.New("its sidecar never registered")
	case prev.Pid == here.Pid && prev.Start == here.Start && prev.PidNS == here.PidNS:
		return errors.New("it is this sidecar's own")
	}
	if prev.PidNS != here.PidNS {
		// A namespace's processes die with its first process: a sidecar
		// that was pid 1 (a container's entrypoint) took everything of
		// its container with it, the guard's processes included. Of any
		// other namespace nothing can be seen or killed from here.
		if prev.Pid == 1 {
			return nil
		}
		return fmt.Errorf("its sidecar (pid %d) ran in another pid namespace (%s), whose processes cannot be seen from here", prev.Pid, prev.PidNS)
	}
	if p, ok := guard.ReadProc(prev.Pid); ok && p.Start == prev.Start && p.Running() {
		return fmt.Errorf("%w: pid %d serves node %s of job %s; stop it first, or give this sidecar another --node-id", ErrPredecessorRunning, prev.Pid, prev.Node, prev.Job)
	}
	return nil
}

// TakeBack takes the node back from the predecessor that left prev, which
// Assess allowed: it kills whatever the predecessor's guard left, and only
// once none of it can run any more does it revoke the predecessor's lease,
// with a takeover record (presence.TakeOver). An error means the lease was
// not revoked: the node waits for it to expire.
func TakeBack(ctx context.Context, cli *clientv3.Client, keys membership.Keys, prev, here State) error {
	if g := prev.Guard; g != nil && prev.PidNS == here.PidNS {
		if err := launcher.Reclaim(launcher.GuardInfo{Pid: g.Pid, Marker: g.Marker, Cgroup: g.Cgroup}, g.Start); err != nil {
			return err
		}
	}
	return presence.TakeOver(ctx, cli, keys, presence.TakeoverRequest{
		Job: prev.Job, Node: prev.Node, Lease: clientv3.LeaseID(prev.Lease), TTL: time.Duration(prev.TTLSeconds) * time.Second,
	})
}
