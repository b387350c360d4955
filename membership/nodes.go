package membership

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// LiveNode is a node record as it stands in etcd.
type LiveNode struct {
	Node
	// JoinRevision is the revision that created the record: the join order.
	JoinRevision int64
	// ModRevision is the revision of the record's last change: the order in
	// which nodes reported.
	ModRevision int64
	Lease       clientv3.LeaseID
}

// InvalidRecord is a key whose value could not be decoded.
type InvalidRecord struct {
	Key string
	Err error
}

// NodeSet is the complete set of a job's nodes at a revision.
type NodeSet struct {
	Revision int64
	// Nodes in join order.
	Nodes []LiveNode
	// Invalid lists node keys holding malformed records; they are not in
	// Nodes.
	Invalid []InvalidRecord
}

// DecodeLiveNode decodes a node key's value and checks that the record names
// the node of its key.
func DecodeLiveNode(kv KeyValue, id string) (LiveNode, error) {
	n, err := DecodeNode(kv.Value)
	if err != nil {
		return LiveNode{}, err
	}
	if n.ID != id {
		return LiveNode{}, &mismatchError{key: kv.Key, id: n.ID}
	}
	if kv.Lease == 0 {
		// A node is present only while its sidecar renews its lease;
		// without one the record would outlive the node.
		return LiveNode{}, fmt.Errorf("%w: node record at %s has no lease", ErrInvalidRecord, kv.Key)
	}
	return LiveNode{Node: n, JoinRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Lease: kv.Lease}, nil
}

type mismatchError struct{ key, id string }

func (e *mismatchError) Error() string {
	return "membership: invalid record: node record at " + e.key + " names node " + e.id
}

func (e *mismatchError) Unwrap() error { return ErrInvalidRecord }

// SortByJoin orders nodes by join revision, then id, so that every reader
// sees the same order.
func SortByJoin(nodes []LiveNode) {
	sort.Slice(nodes, func(i, j int) bool {
		if nodes[i].JoinRevision != nodes[j].JoinRevision {
			return nodes[i].JoinRevision < nodes[j].JoinRevision
		}
		return nodes[i].ID < nodes[j].ID
	})
}

// WatchNodes delivers the complete current node set of job every time it
// changes. A slow reader gets the newest set, never a stale one; the channel
// closes when ctx is done.
func WatchNodes(ctx context.Context, cli *clientv3.Client, keys Keys, job string, logger hclog.Logger) (<-chan NodeSet, error) {
	if err := ValidateJobID(job); err != nil {
		return nil, err
	}
	prefix := keys.Nodes(job)
	out := make(chan NodeSet, 1)
	go func() {
		defer close(out)
		type decoded struct {
			node LiveNode
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
				n, err := DecodeLiveNode(kv, kv.Key[len(prefix):])
				known[kv.Key] = decoded{n, err}
			}
			set := NodeSet{Revision: u.Revision, Nodes: make([]LiveNode, 0, len(known))}
			for key, d := range known {
				if d.err != nil {
					set.Invalid = append(set.Invalid, InvalidRecord{Key: key, Err: d.err})
					continue
				}
				set.Nodes = append(set.Nodes, d.node)
			}
			SortByJoin(set.Nodes)
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
	Plan *Plan
	// Err is set when the stored plan is malformed.
	Err error
}

// WatchPlan delivers job's plan every time it changes, newest first as in
// WatchNodes; the channel closes when ctx is done. A plan in phase run
// comes with its rank table attached: the last table it delivered with the
// plan's delta applied, one from tables (shared by the agents of a
// process, may be nil), or the stored snapshot. Plans of other phases name
// the table without attaching it: a node stops whatever it runs.
func WatchPlan(ctx context.Context, cli *clientv3.Client, keys Keys, job string, tables *TableCache, logger hclog.Logger) (<-chan PlanUpdate, error) {
	if err := ValidateJobID(job); err != nil {
		return nil, err
	}
	out := make(chan PlanUpdate, 1)
	go func() {
		defer close(out)
		var have *Table
		_ = Follow(ctx, cli, Range{Key: keys.Plan(job)}, logger, func(u Update) error {
			pu := PlanUpdate{Revision: u.Revision}
			if len(u.Changes) == 0 && !u.Reset {
				return nil
			}
			if len(u.Changes) > 0 {
				last := u.Changes[len(u.Changes)-1]
				if !last.Deleted {
					p, err := DecodePlan(last.Value)
					if err == nil && p.Phase == PhaseRun && p.Unresolved() {
						var t *Table
						t, err = resolveWatchedTable(ctx, cli, keys, job, tables, p, have, last.ModRevision)
						if errors.Is(err, ErrTableMissing) {
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
func resolveWatchedTable(ctx context.Context, cli *clientv3.Client, keys Keys, job string, tables *TableCache, p Plan, have *Table, rev int64) (*Table, error) {
	retry := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0))
	src := TableSource{Cache: tables, Fetch: func(ref TableRef) ([]byte, error) {
		return ReadTableSnapshot(ctx, cli, keys, job, ref, rev)
	}}
	for {
		t, err := src.Resolve(*p.Table, p.Delta, have)
		if err == nil || errors.Is(err, ErrInvalidRecord) || errors.Is(err, ErrTableMissing) || ctx.Err() != nil {
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
