package coordinator_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/membership"
)

func waitLeader(t *testing.T, c *runningCoordinator) {
	t.Helper()
	require.Eventually(t, c.IsLeader, 20*time.Second, 5*time.Millisecond, "replica never took the lead")
}

func TestOnlyOneReplicaLeads(t *testing.T) {
	h := newHarness(t)
	replicas := []*runningCoordinator{h.startCoordinator("c1", nil), h.startCoordinator("c2", nil), h.startCoordinator("c3", nil)}
	require.Eventually(t, func() bool {
		leaders := 0
		for _, r := range replicas {
			if r.IsLeader() {
				leaders++
			}
		}
		return leaders == 1
	}, 20*time.Second, 5*time.Millisecond)

	// The job runs once, whichever replica leads.
	h.scale("job", "2")
	nodes := h.nodes("job", "n0", "n1")
	h.waitRunning("job", 2, 0)
	assert.Equal(t, []int64{1}, generations(nodes[0]))
}

func TestLeaderFailover(t *testing.T) {
	h := newHarness(t)
	c1 := h.startCoordinator("c1", nil)
	waitLeader(t, c1)
	c2 := h.startCoordinator("c2", nil)
	h.scale("job", "3")
	nodes := h.nodes("job", "n0", "n1", "n2")
	h.waitRunning("job", 3, 0)
	planBefore := h.plan("job")

	// The leader resigns; the standby takes over from what is in etcd and
	// leaves the healthy generation alone.
	c1.Stop()
	waitLeader(t, c2)
	c3 := h.startCoordinator("c3", nil) // the next standby
	st := h.waitStatus("job", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	assert.Equal(t, int64(1), st.Generation)
	assert.Equal(t, planBefore, h.plan("job"), "a new leader does not rewrite a healthy plan")
	for _, n := range nodes {
		assert.Equal(t, []int64{1}, generations(n), "node %s was not restarted", n.ID)
	}

	// Mid-change failover: the leader commits the stop for a lost member,
	// then goes away before the replacement arrives; its successor finishes
	// the generation.
	nodes[1].Leave()
	h.waitStatus("job", "Waiting in generation 2", func(s membership.Status) bool {
		return s.Phase == membership.JobWaiting && s.Generation == 2
	})
	c2.Stop()
	h.node("job", "n3")
	waitLeader(t, c3)
	st = h.waitRunning("job", 3, 1)
	assert.Equal(t, int64(2), st.Generation)
	assert.Equal(t, map[string]int{"n0": 0, "n3": 1, "n2": 2}, h.ranks("job"))
	assert.Equal(t, []int64{1, 2}, generations(nodes[0]))
}

func TestLeaderCrashFailsOverAfterSessionTTL(t *testing.T) {
	h := newHarness(t)
	crashing := h.srv.Client(t)
	c1 := h.startCoordinator("c1", func(c *coordinator.Config) { c.Client = crashing })
	waitLeader(t, c1)
	c2 := h.startCoordinator("c2", nil)
	h.scale("job", "2")
	nodes := h.nodes("job", "n0", "n1")
	h.waitRunning("job", 2, 0)

	// Cutting the leader off from etcd stops its keepalives without a
	// resignation: the standby leads once the session lease expires, and no
	// write of the old leader can land after that (its transactions are
	// fenced on its election key).
	require.NoError(t, crashing.Close())
	waitLeader(t, c2)
	nodes[0].Leave()
	h.node("job", "n2")
	st := h.waitRunning("job", 2, 1)
	assert.Equal(t, map[string]int{"n2": 0, "n1": 1}, h.ranks("job"))
	assert.Equal(t, []int64{1, 2}, generations(nodes[1]))
	_ = st
}

func TestEtcdRestart(t *testing.T) {
	t.Run("outage shorter than the TTL: leases survive, the generation goes on", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		// A graceful etcd stop drains open watches for up to five seconds;
		// a TTL of ten absorbs that.
		h.nodeTTL = 10 * time.Second
		h.startCoordinator("c1", func(c *coordinator.Config) { c.SessionTTL = 10 * time.Second })
		h.scale("job", "2")
		nodes := h.nodes("job", "n0", "n1")
		h.waitRunning("job", 2, 0)

		h.srv.Stop()
		h.srv.Restart(t)
		// Wait for every node to renew its lease with the restarted etcd.
		renewed := map[string]int64{}
		for _, n := range nodes {
			renewed[n.ID] = n.Registration().Renewals()
		}
		require.Eventually(t, func() bool {
			for _, n := range nodes {
				if n.Registration().Renewals() <= renewed[n.ID] {
					return false
				}
			}
			return true
		}, 30*time.Second, 10*time.Millisecond)

		for _, n := range nodes {
			assert.Zero(t, n.Registration().Losses(), "node %s kept its lease", n.ID)
			assert.Equal(t, []int64{1}, generations(n), "node %s was not restarted", n.ID)
		}
		st := h.waitStatus("job", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
		assert.Equal(t, int64(1), st.Generation)

		// The protocol works after the restart: watches resumed.
		nodes[1].Leave()
		h.node("job", "n2")
		st = h.waitRunning("job", 2, 1)
		assert.Equal(t, int64(2), st.Generation)
		assert.Equal(t, []int64{1, 2}, generations(nodes[0]))
	})

	t.Run("outage longer than the TTL: nodes fence, then come back", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		reg := prometheus.NewRegistry()
		h.startCoordinator("c1", func(c *coordinator.Config) { c.Registerer = reg })
		h.scale("job", "2")
		nodes := h.nodes("job", "n0", "n1")
		h.waitRunning("job", 2, 0)

		h.srv.Stop() // drains for five seconds, more than the TTL of two
		// A node that cannot renew its lease kills its workload before the
		// lease can expire on the server.
		waitStopped(t, nodes...)
		for _, n := range nodes {
			assert.Equal(t, int64(1), n.Registration().Losses(), "node %s fenced itself", n.ID)
		}
		h.srv.Restart(t)

		st := h.waitRunning("job", 2, 1)
		assert.Equal(t, 0, st.Restarts, "losing etcd does not spend the restart budget")
		for _, n := range nodes {
			gens := generations(n)
			assert.Greater(t, gens[len(gens)-1], int64(1), "node %s runs a new generation", n.ID)
		}
		require.Eventually(t, func() bool {
			return metricValue(t, reg, "elastic_node_lease_losses_total") == 2
		}, 10*time.Second, 5*time.Millisecond, "the coordinator counts the nodes' lease losses")
	})
}

func TestJobsWithPrefixNamesStayApart(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", nil)
	h.scale("a", "2")
	h.scale("ab", "2")
	a := h.nodes("a", "n0", "n1")
	ab := h.nodes("ab", "n0", "n1")
	h.waitRunning("a", 2, 0)
	h.waitRunning("ab", 2, 0)

	a[1].Leave()
	h.waitStatus("a", "Waiting", func(s membership.Status) bool { return s.Phase == membership.JobWaiting })
	h.scale("a", "1")
	h.waitRunning("a", 1, 1)

	// A broken spec is said of its own job only, and changes nothing.
	_, err := h.cli.Put(t.Context(), h.keys.Spec("a"), `{"np": "lots"}`)
	require.NoError(t, err)
	st := h.waitStatus("a", "told of its spec", func(s membership.Status) bool { return s.Malformed != "" })
	assert.Equal(t, membership.JobRunning, st.Phase)
	assert.Contains(t, st.Malformed, "spec: ")

	h.scale("ab", "1")
	h.waitRunning("ab", 1, 1)
	stAB, err := h.client.Status(t.Context(), "ab")
	require.NoError(t, err)
	assert.Equal(t, int64(2), stAB.Generation, "job ab saw only its own changes")
	assert.Equal(t, []int64{1, 2}, generations(ab[0]))

	resp, err := h.cli.Get(t.Context(), h.keys.Job("a"), clientv3WithPrefix())
	require.NoError(t, err)
	for _, kv := range resp.Kvs {
		assert.NotContains(t, string(kv.Key), "/jobs/ab/", "a range over job a must not reach job ab")
	}
}
