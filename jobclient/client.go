package jobclient

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// ErrJobNotFound is returned for a job that has no keys in etcd.
var ErrJobNotFound = errors.New("jobclient: job not found")

// Client reads and changes jobs the way the command line does; it needs no
// leadership and can run anywhere.
type Client struct {
	cli  *clientv3.Client
	keys membership.Keys
}

// New returns a client of the jobs under keys.
func New(cli *clientv3.Client, keys membership.Keys) *Client {
	if keys == (membership.Keys{}) {
		keys = membership.DefaultKeys()
	}
	return &Client{cli: cli, keys: keys}
}

// Scale sets a job's target np, creating the job's spec with defaults if it
// has none, and returns the spec as stored. A stored spec that is malformed
// is replaced by the last good one with the new np (Resize says so).
func (c *Client) Scale(ctx context.Context, job string, np membership.NP) (membership.Spec, error) {
	w, err := c.Resize(ctx, ScaleRequest{Job: job, NP: np, Create: true})
	return w.Spec, err
}

// ScaleRequest is a change of a job's target np.
type ScaleRequest struct {
	Job string
	// NP is the new target (membership.ParseNP reads "N" or "MIN:MAX").
	NP membership.NP
	// Create lets the change create a job that has no keys at all; without
	// it such a job is ErrJobNotFound (a mistyped id must not start a job
	// that waits for ever). A job with nodes but no spec yet exists.
	Create bool
	// Name is the name a created spec records (Spec.Name).
	Name string
}

// Resize changes a job's target np as req says and returns the spec as
// stored. A stored spec that is malformed is replaced by the last good one
// the coordinator keeps, with the new np, and the result's Repaired says
// why the old value was malformed; with no good one ever stored it is
// membership.ErrNoGoodSpec.
func (c *Client) Resize(ctx context.Context, req ScaleRequest) (membership.SpecWrite, error) {
	job := req.Job
	if err := membership.ValidateJobID(job); err != nil {
		return membership.SpecWrite{}, err
	}
	target := req.NP
	if err := target.Validate(); err != nil {
		return membership.SpecWrite{}, err
	}
	if !req.Create {
		resp, err := c.cli.Get(ctx, c.keys.Job(job), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return membership.SpecWrite{}, fmt.Errorf("read job: %w", err)
		}
		if resp.Count == 0 {
			return membership.SpecWrite{}, fmt.Errorf("%w: %s", ErrJobNotFound, job)
		}
	}
	initial := membership.DefaultSpec(target)
	initial.Name = req.Name
	return membership.UpdateSpec(ctx, c.cli, c.keys, job, func(s *membership.Spec) error {
		// A spec written from a Kubernetes resource follows that
		// resource: a change here would be undone at once.
		if s.Owner != "" {
			return fmt.Errorf("job %s is run by %s: scale that resource (kubectl scale)", job, s.Owner)
		}
		s.NP, s.Target = target, 0
		return nil
	}, initial)
}

// Spec returns a job's spec; ErrJobNotFound when it has none.
func (c *Client) Spec(ctx context.Context, job string) (membership.Spec, error) {
	if err := membership.ValidateJobID(job); err != nil {
		return membership.Spec{}, err
	}
	resp, err := c.cli.Get(ctx, c.keys.Spec(job))
	if err != nil {
		return membership.Spec{}, fmt.Errorf("read spec: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return membership.Spec{}, fmt.Errorf("%w: %s has no spec", ErrJobNotFound, job)
	}
	return membership.DecodeSpec(resp.Kvs[0].Value)
}

// Status returns a job's status as the leader last wrote it. A job with a
// spec but no status yet is Waiting.
func (c *Client) Status(ctx context.Context, job string) (membership.Status, error) {
	if err := membership.ValidateJobID(job); err != nil {
		return membership.Status{}, err
	}
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(c.keys.Status(job)),
		clientv3.OpGet(c.keys.Spec(job)),
	).Commit()
	if err != nil {
		return membership.Status{}, fmt.Errorf("read status: %w", err)
	}
	statusKVs := resp.Responses[0].GetResponseRange().Kvs
	specKVs := resp.Responses[1].GetResponseRange().Kvs
	if len(statusKVs) == 1 {
		s, err := membership.DecodeStatus(statusKVs[0].Value)
		if err != nil {
			return membership.Status{}, fmt.Errorf("job %s: %w", job, err)
		}
		return s, nil
	}
	if len(specKVs) == 0 {
		return membership.Status{}, fmt.Errorf("%w: %s", ErrJobNotFound, job)
	}
	s := membership.Status{Phase: membership.JobWaiting, Message: "no coordinator has reported on this job yet"}
	if spec, err := membership.DecodeSpec(specKVs[0].Value); err == nil {
		s.NP = spec.Workers()
	}
	return s, nil
}

// Events returns a job's retained events, oldest first. Malformed events are
// skipped.
func (c *Client) Events(ctx context.Context, job string) ([]membership.Event, error) {
	if err := membership.ValidateJobID(job); err != nil {
		return nil, err
	}
	resp, err := c.cli.Get(ctx, c.keys.Events(job), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	out := make([]membership.Event, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if e, err := membership.DecodeEvent(kv.Value); err == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// Plan returns a job's current plan.
func (c *Client) Plan(ctx context.Context, job string) (membership.Plan, error) {
	if err := membership.ValidateJobID(job); err != nil {
		return membership.Plan{}, err
	}
	resp, err := c.cli.Get(ctx, c.keys.Plan(job))
	if err != nil {
		return membership.Plan{}, fmt.Errorf("read plan: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return membership.Plan{}, fmt.Errorf("%w: %s has no plan", ErrJobNotFound, job)
	}
	p, err := membership.DecodePlan(resp.Kvs[0].Value)
	if err != nil {
		return membership.Plan{}, err
	}
	if err := membership.ResolvePlan(ctx, c.cli, c.keys, job, &p, resp.Kvs[0].ModRevision, nil); err != nil {
		return membership.Plan{}, err
	}
	return p, nil
}

// Nodes returns a job's node records in join order. Malformed records are
// skipped.
func (c *Client) Nodes(ctx context.Context, job string) ([]membership.LiveNode, error) {
	if err := membership.ValidateJobID(job); err != nil {
		return nil, err
	}
	prefix := c.keys.Nodes(job)
	resp, err := c.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read nodes: %w", err)
	}
	out := make([]membership.LiveNode, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		n, err := membership.DecodeLiveNode(membership.KeyValue{
			Key: string(kv.Key), Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Lease: clientv3.LeaseID(kv.Lease),
		}, string(kv.Key[len(prefix):]))
		if err == nil {
			out = append(out, n)
		}
	}
	membership.SortByJoin(out)
	return out, nil
}

// errStopWatch ends WatchStatus without an error.
var errStopWatch = errors.New("stop watching")

// WatchStatus calls fn with the job's status now and after every change,
// until fn reports done or fails, or ctx ends. It cannot miss the last
// status: a broken watch lists the status again.
func (c *Client) WatchStatus(ctx context.Context, job string, fn func(membership.Status) (done bool, err error)) error {
	if err := membership.ValidateJobID(job); err != nil {
		return err
	}
	err := presence.Follow(ctx, c.cli, presence.Range{Key: c.keys.Status(job)}, nil, func(u presence.Update) error {
		if len(u.Changes) == 0 {
			return nil
		}
		last := u.Changes[len(u.Changes)-1]
		if last.Deleted {
			return nil
		}
		s, err := membership.DecodeStatus(last.Value)
		if err != nil {
			return nil // the leader writes over it
		}
		done, err := fn(s)
		if err != nil {
			return err
		}
		if done {
			return errStopWatch
		}
		return nil
	})
	if errors.Is(err, errStopWatch) {
		return nil
	}
	return err
}

// Bridge returns the Kubernetes bridge's report on a job, and false when
// the bridge has not reported on it.
func (c *Client) Bridge(ctx context.Context, job string) (membership.BridgeStatus, bool, error) {
	return readReport(ctx, c, job, "bridge", c.keys.Bridge, membership.DecodeBridgeStatus)
}

// Autoscaler returns the autoscaler's report on a job, and false when the
// autoscaler has not reported on it.
func (c *Client) Autoscaler(ctx context.Context, job string) (membership.AutoscalerStatus, bool, error) {
	return readReport(ctx, c, job, "autoscaler", c.keys.Autoscaler, membership.DecodeAutoscalerStatus)
}

// readReport reads a job's record at key(job), and false when there is
// none.
func readReport[T any](ctx context.Context, c *Client, job, what string, key func(string) string, decode func([]byte) (T, error)) (T, bool, error) {
	var zero T
	if err := membership.ValidateJobID(job); err != nil {
		return zero, false, err
	}
	resp, err := c.cli.Get(ctx, key(job))
	if err != nil {
		return zero, false, fmt.Errorf("read %s status: %w", what, err)
	}
	if len(resp.Kvs) == 0 {
		return zero, false, nil
	}
	v, err := decode(resp.Kvs[0].Value)
	return v, err == nil, err
}
