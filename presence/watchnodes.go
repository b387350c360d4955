package presence

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// NodeSet is the complete set of a job's nodes at a revision.
type NodeSet struct {
	Revision int64
	// Nodes in join order.
	Nodes []membership.LiveNode
	// Invalid lists node keys holding malformed records; they are not in
	// Nodes.
	Invalid []membership.InvalidRecord
}

// WatchNodes delivers the complete current node set of job every time it
// changes. A slow reader gets the newest set, never a stale one; the channel
// closes when ctx is done.
func WatchNodes(ctx context.Context, cli *clientv3.Client, keys membership.Keys, job string, logger hclog.Logger) (<-chan NodeSet, error) {
	if err := membership.ValidateJobID(job); err != nil {
		return nil, err
	}
	prefix := keys.Nodes(job)
	out := make(chan NodeSet, 1)
	go func() {
		defer close(out)
		type decoded struct {
			node membership.LiveNode
			err  error
		}
		known := map[string]decoded{}
		_ = Follow(ctx, cli, Range{Key: prefix, Prefix: true}, logger, func(u Update) error {
			if u.Reset {
				clear(known)
			}
			for _, kv := range u.Changes {
				if kv.Deleted {
					delete(known, kv.Key)
					continue
				}
				n, err := membership.DecodeLiveNode(kv, kv.Key[len(prefix):])
				known[kv.Key] = decoded{n, err}
			}
			set := NodeSet{Revision: u.Revision, Nodes: make([]membership.LiveNode, 0, len(known))}
			for key, d := range known {
				if d.err != nil {
					set.Invalid = append(set.Invalid, membership.InvalidRecord{Key: key, Err: d.err})
					continue
				}
				set.Nodes = append(set.Nodes, d.node)
			}
			membership.SortByJoin(set.Nodes)
			sort.Slice(set.Invalid, func(i, j int) bool { return set.Invalid[i].Key < set.Invalid[j].Key })
			sendLatest(ctx, out, set)
			return nil
		})
	}()
	return out, nil
}

// PlanUpdate is a job's plan as WatchPlan delivers it.
type PlanUpdate struct {
	Revision int64
	// Plan is nil while the job has no plan.
	Plan *membership.Plan
	// Err is set when the stored plan is malformed.
	Err error
}

// WatchPlan delivers job's plan every time it changes, newest first as in
// WatchNodes; the channel closes when ctx is done. A plan in phase run
// comes with its rank table attached: the last table it delivered with the
// plan's delta applied, one from tables (shared by the agents of a
// process, may be nil), or the stored snapshot. Plans of other phases name
// the table without attaching it: a node stops whatever it runs.
func WatchPlan(ctx context.Context, cli *clientv3.Client, keys membership.Keys, job string, tables *membership.TableCache, logger hclog.Logger) (<-chan PlanUpdate, error) {
	if err := membership.ValidateJobID(job); err != nil {
		return nil, err
	}
	out := make(chan PlanUpdate, 1)
	go func() {
		defer close(out)
		var have *membership.Table
		_ = Follow(ctx, cli, Range{Key: keys.Plan(job)}, logger, func(u Update) error {
			pu := PlanUpdate{Revision: u.Revision}
			if len(u.Changes) == 0 && !u.Reset {
				return nil
			}
			if len(u.Changes) > 0 {
				last := u.Changes[len(u.Changes)-1]
				if !last.Deleted {
					p, err := membership.DecodePlan(last.Value)
					if err == nil && p.Phase == membership.PhaseRun && p.Unresolved() {
						var t *membership.Table
						t, err = resolveWatchedTable(ctx, cli, keys, job, tables, p, have, last.ModRevision)
						if errors.Is(err, membership.ErrTableMissing) {
							return nil // replaced since: the newer plan follows
						}
						if err == nil {
							p.AttachTable(t)
							have = t
						}
					}
					if err != nil {
						pu.Err = err
					} else {
						pu.Plan = &p
					}
				}
			}
			sendLatest(ctx, out, pu)
			return nil
		})
	}()
	return out, nil
}

// resolveWatchedTable finds the table of a watched plan, reading the
// snapshot at the plan's revision if it must, and retrying while etcd does
// not answer.
func resolveWatchedTable(ctx context.Context, cli *clientv3.Client, keys membership.Keys, job string, tables *membership.TableCache, p membership.Plan, have *membership.Table, rev int64) (*membership.Table, error) {
	retry := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0))
	src := membership.TableSource{Cache: tables, Fetch: func(ref membership.TableRef) ([]byte, error) {
		return membership.ReadTableSnapshot(ctx, cli, keys, job, ref, rev)
	}}
	for {
		t, err := src.Resolve(*p.Table, p.Delta, have)
		if err == nil || errors.Is(err, membership.ErrInvalidRecord) || errors.Is(err, membership.ErrTableMissing) || ctx.Err() != nil {
			return t, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(retry.NextBackOff()):
		}
	}
}

// sendLatest replaces whatever out holds with v. Only one goroutine may send
// on out, which has a buffer of one.
func sendLatest[T any](ctx context.Context, out chan T, v T) {
	select {
	case <-out:
	default:
	}
	select {
	case out <- v:
	case <-ctx.Done():
	}
}
