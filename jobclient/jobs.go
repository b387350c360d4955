package jobclient

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/membership"
)

// JobSummary is one job as `coordinator jobs` lists it.
type JobSummary struct {
	ID string
	// Spec is nil for a job that has nodes but no spec yet.
	Spec *membership.Spec
	// Status is the coordinator's last report; Waiting without one.
	Status membership.Status
	// Nodes counts the job's node records.
	Nodes int64
}

// Jobs lists every job under the key prefix in id order: anything with a
// spec, a node, a plan or a status. It costs one range per job, not one
// read of every node.
func (c *Client) Jobs(ctx context.Context) ([]JobSummary, error) {
	var out []JobSummary
	from := c.keys.Jobs()
	end := clientv3.GetPrefixRangeEnd(c.keys.Jobs())
	for {
		resp, err := c.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		if len(resp.Kvs) == 0 {
			return out, nil
		}
		key := string(resp.Kvs[0].Key)
		id, _, _ := strings.Cut(strings.TrimPrefix(key, c.keys.Jobs()), "/")
		// The next job's keys start after every key of this one.
		from = c.keys.Job(id)[:len(c.keys.Job(id))-1] + "0"
		if membership.ValidateJobID(id) != nil {
			continue // not a job's key
		}
		s, err := c.summary(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
}

func (c *Client) summary(ctx context.Context, id string) (JobSummary, error) {
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(c.keys.Spec(id)),
		clientv3.OpGet(c.keys.Status(id)),
		clientv3.OpGet(c.keys.Nodes(id), clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return JobSummary{}, fmt.Errorf("read job %s: %w", id, err)
	}
	s := JobSummary{ID: id, Status: membership.Status{Phase: membership.JobWaiting, Message: "no coordinator has reported on this job yet"}}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if spec, err := membership.DecodeSpec(kvs[0].Value); err == nil {
			s.Spec = &spec
			s.Status.NP = spec.Workers()
		}
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) == 1 {
		if st, err := membership.DecodeStatus(kvs[0].Value); err == nil {
			s.Status = st
		}
	}
	s.Nodes = resp.Responses[2].GetResponseRange().Count
	return s, nil
}

// ErrJobRunning is returned by Delete for a job that has not ended.
var ErrJobRunning = errors.New("jobclient: job has not ended")

// StoppingError is returned by Delete for a job that has ended while some
// of its nodes are still registered, or evicted and not yet certainly
// fenced: their processes may still run. Deleting the job then would let a
// job created again under the same name start a generation beside them.
type StoppingError struct {
	// Nodes are the node records left; Evicted the eviction records.
	Nodes, Evicted int64
}

func (e *StoppingError) Error() string {
	var parts []string
	if e.Nodes > 0 {
		parts = append(parts, english.Count(int(e.Nodes), "node")+" still registered")
	}
	if e.Evicted > 0 {
		parts = append(parts, english.Count(int(e.Evicted), "node")+" evicted and not yet certainly stopped")
	}
	their := "their"
	if e.Nodes+e.Evicted == 1 {
		their = "its"
	}
	return strings.Join(parts, " and ") + ": " + their + " processes may still run"
}

// Delete deletes every key of a job that has ended (Succeeded or Failed)
// and whose nodes have all stopped, in one transaction conditional on the
// status it read and on no node or eviction record being left: a job that
// starts again meanwhile is not deleted. A job that has not ended is
// ErrJobRunning, one whose nodes are still stopping a *StoppingError; a
// job run by a Kubernetes resource is refused, since its controller would
// write it again.
func (c *Client) Delete(ctx context.Context, job string) (membership.Status, error) {
	if err := membership.ValidateJobID(job); err != nil {
		return membership.Status{}, err
	}
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(c.keys.Spec(job)),
		clientv3.OpGet(c.keys.Status(job)),
		clientv3.OpGet(c.keys.Job(job), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(c.keys.Nodes(job), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(c.keys.Evictions(job), clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return membership.Status{}, fmt.Errorf("read job: %w", err)
	}
	if resp.Responses[2].GetResponseRange().Count == 0 {
		return membership.Status{}, fmt.Errorf("%w: %s", ErrJobNotFound, job)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		if s, err := membership.DecodeSpec(kvs[0].Value); err == nil && s.Owner != "" {
			return membership.Status{}, fmt.Errorf("job %s is run by %s: delete that resource (kubectl delete)", job, s.Owner)
		}
	}
	statusKVs := resp.Responses[1].GetResponseRange().Kvs
	var st membership.Status
	if len(statusKVs) == 1 {
		st, _ = membership.DecodeStatus(statusKVs[0].Value)
	}
	if !st.Phase.Done() {
		if st.Phase == "" {
			st.Phase = membership.JobWaiting
		}
		return st, fmt.Errorf("%w: %s is %s", ErrJobRunning, job, st.Phase)
	}
	nodes, evicted := resp.Responses[3].GetResponseRange().Count, resp.Responses[4].GetResponseRange().Count
	if nodes > 0 || evicted > 0 {
		return st, &StoppingError{Nodes: nodes, Evicted: evicted}
	}
	del, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(c.keys.Status(job)), "=", statusKVs[0].ModRevision),
			membership.NoKeysUnder(c.keys.Nodes(job)), membership.NoKeysUnder(c.keys.Evictions(job))).
		Then(clientv3.OpDelete(c.keys.Job(job), clientv3.WithPrefix())).
		Commit()
	if err != nil {
		return st, fmt.Errorf("delete job: %w", err)
	}
	if !del.Succeeded {
		return st, fmt.Errorf("job %s changed while it was deleted; nothing was deleted, try again", job)
	}
	return st, nil
}

// Cancel asks the coordinator to end a job now, failed, with reason, and
// waits until it has (or ctx ends). The sidecars stop their processes
// and exit with the job.
func (c *Client) Cancel(ctx context.Context, job, reason string) (membership.Status, error) {
	if _, err := c.RequestCancel(ctx, job, reason); err != nil {
		return membership.Status{}, err
	}
	return c.WaitEnded(ctx, job)
}

// RequestCancel asks the coordinator to end a job now, failed, with
// reason, and returns the spec written without waiting. A job without a
// spec gets one that asks for its end; a malformed spec is replaced by the
// last good one with the request (Repaired says so), or, when there is
// none, by one that asks for the end alone.
func (c *Client) RequestCancel(ctx context.Context, job, reason string) (membership.SpecWrite, error) {
	if err := membership.ValidateJobID(job); err != nil {
		return membership.SpecWrite{}, err
	}
	ending := membership.DefaultSpec(membership.NP{Min: 1, Max: 1})
	ending.Cancel = reason
	w, err := membership.UpdateSpec(ctx, c.cli, c.keys, job, func(s *membership.Spec) error { s.Cancel = reason; return nil }, ending)
	if !errors.Is(err, membership.ErrNoGoodSpec) {
		return w, err
	}
	// Nothing good to start from: the job is to end, so a spec that
	// says only that replaces the malformed one, unless it changed.
	key := c.keys.Spec(job)
	resp, err := c.cli.Get(ctx, key)
	if err != nil {
		return membership.SpecWrite{}, fmt.Errorf("read spec: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return c.RequestCancel(ctx, job, reason) // deleted meanwhile
	}
	_, malformed := membership.DecodeSpec(resp.Kvs[0].Value)
	if malformed == nil {
		return c.RequestCancel(ctx, job, reason) // made good meanwhile
	}
	val, err := membership.Encode(ending)
	if err != nil {
		return membership.SpecWrite{}, err
	}
	txn, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(key, val)).Commit()
	if err != nil {
		return membership.SpecWrite{}, fmt.Errorf("write spec: %w", err)
	}
	if !txn.Succeeded {
		return c.RequestCancel(ctx, job, reason)
	}
	return membership.SpecWrite{Spec: ending, Repaired: malformed}, nil
}

// WaitEnded waits until the job has ended (or ctx ends), and returns its
// final status.
func (c *Client) WaitEnded(ctx context.Context, job string) (membership.Status, error) {
	var final membership.Status
	err := c.WatchStatus(ctx, job, func(s membership.Status) (bool, error) {
		final = s
		return s.Phase.Done(), nil
	})
	return final, err
}
