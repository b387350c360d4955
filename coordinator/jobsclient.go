package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

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
			s.Status.NP = spec.Workers().String()
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
var ErrJobRunning = errors.New("coordinator: job has not ended")

// Delete deletes every key of a job that has ended (Succeeded or Failed),
// in one transaction conditional on the status it read: a job that starts
// again meanwhile is not deleted. A job that has not ended is
// ErrJobRunning; a job run by a Kubernetes resource is refused, since its
// controller would write it again.
func (c *Client) Delete(ctx context.Context, job string) (membership.Status, error) {
	if err := membership.ValidateJobID(job); err != nil {
		return membership.Status{}, err
	}
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(c.keys.Spec(job)),
		clientv3.OpGet(c.keys.Status(job)),
		clientv3.OpGet(c.keys.Job(job), clientv3.WithPrefix(), clientv3.WithCountOnly()),
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
	del, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(c.keys.Status(job)), "=", statusKVs[0].ModRevision)).
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
	if err := membership.ValidateJobID(job); err != nil {
		return membership.Status{}, err
	}
	if _, err := c.Spec(ctx, job); errors.Is(err, ErrJobNotFound) {
		// A job without a spec: give it one that asks for its end.
		spec := membership.DefaultSpec(membership.NP{Min: 1, Max: 1})
		spec.Cancel = reason
		if _, err := membership.CreateSpec(ctx, c.cli, c.keys, job, spec); err != nil {
			return membership.Status{}, err
		}
	} else if _, err := membership.UpdateSpec(ctx, c.cli, c.keys, job, func(s *membership.Spec) { s.Cancel = reason }, membership.Spec{}); err != nil {
		return membership.Status{}, err
	}
	var final membership.Status
	err := c.WatchStatus(ctx, job, func(s membership.Status) (bool, error) {
		final = s
		return s.Phase.Done(), nil
	})
	return final, err
}
