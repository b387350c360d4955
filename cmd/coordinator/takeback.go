package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/handover"
	"github.com/elastictraining/coordinator/membership"
)

// takeBack reads what the node's previous sidecar on this machine left in
// the state directory and, where that is safe, kills what it left running
// and revokes its lease, so that the node registers at once instead of
// waiting for that lease to expire. A previous sidecar that still runs is
// an error. It returns the keeper of this sidecar's own state; one that
// keeps nothing where the directory cannot be used.
func (o *sidecarOptions) takeBack(ctx context.Context, cli *clientv3.Client, keys membership.Keys, job, node string, logger hclog.Logger) (*handover.Keeper, error) {
	dir := o.stateDir
	if dir == "" {
		dir = handover.DefaultDir(o.getenv)
	}
	resp, err := cli.Get(ctx, keys.Node(job, node), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("read the node's record: %w", err)
	}
	store, err := handover.Open(dir, handover.Name(resp.Header.ClusterId, keys.Prefix(), job, node))
	if errors.Is(err, handover.ErrHeld) {
		return nil, fmt.Errorf("node %s of job %s: %w; stop it first, or give this sidecar another --node-id", node, job, err)
	}
	here, selfErr := handover.Self()
	if err != nil || selfErr != nil {
		logger.Warn("no state kept for a successor; a restarted sidecar waits for this one's lease to expire", "error", errors.Join(err, selfErr))
		if store != nil {
			store.Close()
		}
		return handover.Discard(), nil
	}
	here.Cluster, here.Prefix, here.Job, here.Node = resp.Header.ClusterId, keys.Prefix(), job, node
	here.TTLSeconds = int64(o.ttl.Seconds())
	prev, ok, err := store.Previous()
	switch {
	case err != nil:
		logger.Warn("state file ignored", "path", store.Path(), "error", err)
	case ok:
		err := handover.Assess(prev, here)
		if errors.Is(err, handover.ErrPredecessorRunning) {
			store.Close()
			return nil, err
		}
		if err != nil {
			logger.Info("previous sidecar's state ignored", "path", store.Path(), "reason", err)
			break
		}
		if err := handover.TakeBack(ctx, cli, keys, prev, here); err != nil {
			logger.Warn("node not taken back; waiting for the previous sidecar's lease to expire", "lease", fmt.Sprintf("%x", prev.Lease), "error", err)
			break
		}
		logger.Info("took the node back from its previous sidecar", "pid", prev.Pid, "lease", fmt.Sprintf("%x", prev.Lease))
	}
	return handover.NewKeeper(store, here, logger), nil
}
