package coordinator_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/simnode"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// harness is one embedded etcd with coordinators and simulated nodes on it.
type harness struct {
	t      testing.TB
	srv    *etcdtest.Server
	cli    *clientv3.Client
	keys   membership.Keys
	client *jobclient.Client
	// nodeTTL is the lease TTL of simulated nodes.
	nodeTTL time.Duration
}

func newHarness(t testing.TB) *harness {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()
	return &harness{t: t, srv: srv, cli: cli, keys: keys, client: jobclient.New(cli, keys), nodeTTL: 2 * time.Second}
}

func testLogger(name string) hclog.Logger {
	if os.Getenv("TEST_LOG") == "" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Debug, Output: os.Stderr})
}

type runningCoordinator struct {
	*coordinator.Coordinator
	cancel context.CancelFunc
	done   chan struct{}
}

// Stop stops the replica, resigning the lead if it holds it.
func (r *runningCoordinator) Stop() {
	r.cancel()
	<-r.done
}

// startCoordinator runs a replica with its own etcd client.
func (h *harness) startCoordinator(id string, tweak func(*coordinator.Config)) *runningCoordinator {
	cfg := coordinator.Config{
		Client: h.srv.Client(h.t), Keys: h.keys, ID: id, SessionTTL: 2 * time.Second,
		StopTimeout: 5 * time.Second, SettleWindow: 300 * time.Millisecond, Logger: testLogger(id),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := coordinator.New(cfg)
	require.NoError(h.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningCoordinator{Coordinator: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = c.Run(ctx)
	}()
	h.t.Cleanup(r.Stop)
	return r
}

// scale sets a job's np through the public API.
func (h *harness) scale(job, np string) {
	target, err := membership.ParseNP(np)
	require.NoError(h.t, err)
	_, err = h.client.Scale(h.t.Context(), job, target)
	require.NoError(h.t, err)
}

// setSpec stores a whole spec.
func (h *harness) setSpec(job string, spec membership.Spec) {
	val, err := membership.Encode(spec)
	require.NoError(h.t, err)
	_, err = h.cli.Put(h.t.Context(), h.keys.Spec(job), val)
	require.NoError(h.t, err)
}

// node starts a simulated node and waits for its record, so that nodes
// started one after another join in that order.
func (h *harness) node(job, id string) *simnode.Node {
	h.t.Helper()
	n := simnode.Start(h.t, simnode.Config{Client: h.cli, Keys: h.keys, Job: job, ID: id, TTL: h.nodeTTL, Logger: testLogger(id)})
	require.Eventually(h.t, func() bool {
		resp, err := h.cli.Get(h.t.Context(), h.keys.Node(job, id))
		return err == nil && len(resp.Kvs) == 1
	}, 10*time.Second, 2*time.Millisecond, "node %s never registered", id)
	return n
}

// nodes starts simulated nodes in join order.
func (h *harness) nodes(job string, ids ...string) []*simnode.Node {
	out := make([]*simnode.Node, len(ids))
	for i, id := range ids {
		out[i] = h.node(job, id)
	}
	return out
}

// waitStatus waits until the job's status satisfies ok and returns it.
func (h *harness) waitStatus(job string, what string, ok func(membership.Status) bool) membership.Status {
	h.t.Helper()
	var last membership.Status
	var lastErr error
	require.Eventually(h.t, func() bool {
		last, lastErr = h.client.Status(h.t.Context(), job)
		return lastErr == nil && ok(last)
	}, 20*time.Second, 5*time.Millisecond, "job %s never reached %s; last status %+v, error %v", job, what, &last, &lastErr)
	return last
}

// waitRunning waits for the job to run generation > after with the given
// number of members and returns the status.
func (h *harness) waitRunning(job string, members int, after int64) membership.Status {
	h.t.Helper()
	return h.waitStatus(job, fmt.Sprintf("Running with %d members after generation %d", members, after), func(s membership.Status) bool {
		return s.Phase == membership.JobRunning && s.Members == members && s.Generation > after
	})
}

func (h *harness) plan(job string) membership.Plan {
	h.t.Helper()
	p, err := h.client.Plan(h.t.Context(), job)
	require.NoError(h.t, err)
	return p
}

// ranks maps node id to worker rank in the job's current plan.
func (h *harness) ranks(job string) map[string]int {
	out := map[string]int{}
	for _, m := range h.plan(job).Members {
		if m.Role == membership.RoleWorker {
			out[m.Node] = m.Rank
		}
	}
	return out
}

// events returns the types of the job's events, oldest first.
func (h *harness) eventTypes(job string) []string {
	h.t.Helper()
	events, err := h.client.Events(h.t.Context(), job)
	require.NoError(h.t, err)
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

// generations returns the generations a node's workload was started in.
func generations(n *simnode.Node) []int64 {
	var out []int64
	for _, a := range n.Workload.Starts() {
		out = append(out, a.Plan.Generation)
	}
	return out
}

// waitStopped waits until none of the nodes runs its workload.
func waitStopped(t *testing.T, nodes ...*simnode.Node) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if _, ok := n.Workload.Running(); ok {
				return false
			}
		}
		return true
	}, 20*time.Second, 2*time.Millisecond, "workloads still running")
}

func clientv3WithPrefix() clientv3.OpOption { return clientv3.WithPrefix() }

func clientv3LeaseID(id int64) clientv3.LeaseID { return clientv3.LeaseID(id) }
