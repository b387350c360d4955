package coordinator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/internal/testkit/simnode"
	"github.com/elastictraining/coordinator/membership"
)

func TestJoinThenRun(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", nil)
	h.scale("job", "3")
	nodes := h.nodes("job", "n0", "n1", "n2")

	st := h.waitRunning("job", 3, 0)
	assert.Equal(t, int64(1), st.Generation)
	assert.Equal(t, 3, st.WorldSize)
	assert.Equal(t, 0, st.Restarts)
	require.NotNil(t, st.Steps, "a running status carries the durations of its steps")

	assert.Equal(t, map[string]int{"n0": 0, "n1": 1, "n2": 2}, h.ranks("job"), "ranks follow join order")
	p := h.plan("job")
	assert.Equal(t, "127.0.0.1:20000", p.Master, "the master is rank 0's rendezvous port")
	for _, n := range nodes {
		a, ok := n.Workload.Running()
		require.True(t, ok, "node %s runs", n.ID)
		assert.Equal(t, int64(1), a.Plan.Generation)
		assert.Equal(t, 3, a.Plan.WorldSize)
	}
	assert.Equal(t, []string{"GenerationStarting", "GenerationRunning"}, h.eventTypes("job"))
}

func TestMemberLossWaitsForReplacement(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(*simnode.Node)
	}{
		{"graceful leave", (*simnode.Node).Leave},
		{"crash", (*simnode.Node).Crash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.startCoordinator("c1", nil)
			h.scale("job", "3")
			nodes := h.nodes("job", "n0", "n1", "n2")
			h.waitRunning("job", 3, 0)

			tc.stop(nodes[1])
			st := h.waitStatus("job", "Waiting in generation 2", func(s membership.Status) bool {
				return s.Phase == membership.JobWaiting && s.Generation == 2
			})
			assert.Equal(t, 2, st.Ready, "two workers are left")
			waitStopped(t, nodes[0], nodes[2])

			h.node("job", "n3")
			st = h.waitRunning("job", 3, 1)
			assert.Equal(t, int64(2), st.Generation)
			assert.Equal(t, 0, st.Restarts, "a membership change does not spend the restart budget")
			assert.Equal(t, map[string]int{"n0": 0, "n3": 1, "n2": 2}, h.ranks("job"), "survivors keep their ranks; the newcomer fills the hole")
			assert.Equal(t, []int64{1, 2}, generations(nodes[0]))
			assert.Equal(t, []int64{1, 2}, generations(nodes[2]))
		})
	}
}

func TestScaleUpAndDown(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", nil)
	h.scale("job", "2")
	nodes := h.nodes("job", "n0", "n1", "n2", "n3")
	h.waitRunning("job", 2, 0)
	_, standby := nodes[2].Workload.Running()
	assert.False(t, standby, "nodes beyond np wait on standby")

	h.scale("job", "4")
	st := h.waitRunning("job", 4, 1)
	assert.Equal(t, 4, st.WorldSize)
	assert.Equal(t, map[string]int{"n0": 0, "n1": 1, "n2": 2, "n3": 3}, h.ranks("job"))

	h.scale("job", "3")
	st = h.waitRunning("job", 3, st.Generation)
	assert.Equal(t, map[string]int{"n0": 0, "n1": 1, "n2": 2}, h.ranks("job"))
	waitStopped(t, nodes[3])

	// A target above the live nodes keeps the current generation running
	// until enough nodes join.
	h.scale("job", "5")
	running := h.waitStatus("job", "a message about the missing nodes", func(s membership.Status) bool {
		return s.Phase == membership.JobRunning && s.Message != ""
	})
	assert.Equal(t, st.Generation, running.Generation, "no restart before the nodes are there")
	assert.Contains(t, running.Message, "4 of 5 worker nodes")
	h.node("job", "n4")
	st = h.waitRunning("job", 5, st.Generation)
	assert.Equal(t, 5, st.WorldSize)

	var seen []int
	for _, a := range nodes[0].Workload.Starts() {
		seen = append(seen, a.Plan.WorldSize)
	}
	assert.Equal(t, []int{2, 4, 3, 5}, seen, "world sizes rank 0 was started with")
	assert.Equal(t, 0, st.Restarts)
}

func TestRangeSettlesThenRestartsAtMax(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", nil)
	h.scale("job", "2:3")
	h.nodes("job", "n0", "n1")
	st := h.waitRunning("job", 2, 0)
	assert.Equal(t, int64(1), st.Generation)

	h.node("job", "n2")
	st = h.waitRunning("job", 3, 1)
	assert.Equal(t, int64(2), st.Generation)
	p := h.plan("job")
	assert.Equal(t, "membership change: 2 → 3 workers", p.Reason)
}

func TestChildFailure(t *testing.T) {
	t.Run("level 0 fails the job", func(t *testing.T) {
		h := newHarness(t)
		h.startCoordinator("c1", nil)
		spec := membership.DefaultSpec(membership.NP{Min: 2, Max: 2})
		spec.FaultTolerance = membership.FaultToleranceNone
		h.setSpec("job", spec)
		nodes := h.nodes("job", "n0", "n1")
		h.waitRunning("job", 2, 0)

		require.True(t, nodes[1].Workload.Exit(3))
		st := h.waitStatus("job", "Failed", func(s membership.Status) bool { return s.Phase == membership.JobFailed })
		assert.Equal(t, 3, st.ExitCode)
		assert.Contains(t, st.Message, "node n1 (worker rank 1) failed with exit code 3")
		for _, n := range nodes {
			res, err := n.Result()
			require.NoError(t, err)
			assert.Equal(t, membership.JobFailed, res.Phase)
			assert.Equal(t, 3, res.ExitCode, "every sidecar exits with the child's code")
		}
		waitStopped(t, nodes...)
	})

	t.Run("level 1 restarts until the budget is spent", func(t *testing.T) {
		h := newHarness(t)
		h.startCoordinator("c1", nil)
		spec := membership.DefaultSpec(membership.NP{Min: 2, Max: 2})
		spec.MaxRestarts = 1
		h.setSpec("job", spec)
		nodes := h.nodes("job", "n0", "n1")
		h.waitRunning("job", 2, 0)

		require.True(t, nodes[1].Workload.Exit(3))
		st := h.waitRunning("job", 2, 1)
		assert.Equal(t, 1, st.Restarts)
		assert.Equal(t, map[string]int{"n0": 0, "n1": 1}, h.ranks("job"), "the same members restart")

		require.True(t, nodes[0].Workload.Exit(4))
		st = h.waitStatus("job", "Failed", func(s membership.Status) bool { return s.Phase == membership.JobFailed })
		assert.Equal(t, 4, st.ExitCode)
		assert.Contains(t, st.Message, "restart budget of 1 is spent")
		res, err := nodes[1].Result()
		require.NoError(t, err)
		assert.Equal(t, 4, res.ExitCode)
	})

	t.Run("level 2 replaces the failing node", func(t *testing.T) {
		h := newHarness(t)
		h.startCoordinator("c1", nil)
		spec := membership.DefaultSpec(membership.NP{Min: 2, Max: 2})
		spec.FaultTolerance = membership.FaultToleranceReplace
		h.setSpec("job", spec)
		nodes := h.nodes("job", "n0", "n1", "n2")
		h.waitRunning("job", 2, 0)

		require.True(t, nodes[0].Workload.Exit(5))
		st := h.waitRunning("job", 2, 1)
		assert.Equal(t, 1, st.Restarts)
		assert.Equal(t, map[string]int{"n2": 0, "n1": 1}, h.ranks("job"), "the standby node takes the failing node's rank")
		assert.Equal(t, []string{"n0"}, h.plan("job").Excluded)
		_, running := nodes[0].Workload.Running()
		assert.False(t, running, "the failing node waits on standby")
	})
}

func TestSuccessPolicies(t *testing.T) {
	t.Run("AllWorkers", func(t *testing.T) {
		h := newHarness(t)
		h.startCoordinator("c1", nil)
		h.scale("job", "2")
		nodes := h.nodes("job", "n0", "n1")
		h.waitRunning("job", 2, 0)

		require.True(t, nodes[0].Workload.Exit(0))
		h.waitStatus("job", "rank 0 done, rank 1 running", func(s membership.Status) bool {
			return s.Phase == membership.JobRunning && s.Message == "1 of 2 workers succeeded; waiting for the rest"
		})
		require.True(t, nodes[1].Workload.Exit(0))
		st := h.waitStatus("job", "Succeeded", func(s membership.Status) bool { return s.Phase == membership.JobSucceeded })
		assert.Equal(t, 0, st.ExitCode)
		for _, n := range nodes {
			res, err := n.Result()
			require.NoError(t, err)
			assert.Equal(t, membership.JobSucceeded, res.Phase)
			assert.Equal(t, 0, res.ExitCode)
		}
	})

	t.Run("Rank0", func(t *testing.T) {
		h := newHarness(t)
		h.startCoordinator("c1", nil)
		spec := membership.DefaultSpec(membership.NP{Min: 2, Max: 2})
		spec.SuccessPolicy = membership.SuccessRank0
		h.setSpec("job", spec)
		nodes := h.nodes("job", "n0", "n1")
		h.waitRunning("job", 2, 0)

		require.True(t, nodes[0].Workload.Exit(0))
		h.waitStatus("job", "Succeeded", func(s membership.Status) bool { return s.Phase == membership.JobSucceeded })
		res, err := nodes[1].Result()
		require.NoError(t, err)
		assert.Equal(t, membership.JobSucceeded, res.Phase)
		waitStopped(t, nodes[1])
	})
}

func TestStopTimeoutEvictsNodeThatNeverAcks(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", func(c *coordinator.Config) { c.StopTimeout = time.Second })
	h.scale("job", "2")
	nodes := h.nodes("job", "n0", "n1", "n2")
	h.waitRunning("job", 2, 0)
	release := nodes[1].Workload.Hang()
	t.Cleanup(release)

	require.True(t, nodes[0].Workload.Exit(1))
	st := h.waitRunning("job", 2, 1)
	assert.Equal(t, 0, h.ranks("job")["n0"])
	assert.Equal(t, 1, st.Restarts, "an eviction for a slow stop does not explain the failure")
	assert.Contains(t, h.eventTypes("job"), "NodeEvicted")
}

// TestRankTablesInManyChunks: a table larger than one chunk is stored chunk
// by chunk before its plan, every node (those with the previous table, and
// one without) reads it, and the plan's transaction leaves only the table
// it names.
func TestRankTablesInManyChunks(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", func(c *coordinator.Config) { c.TableChunkBytes = 40 })
	h.scale("job", "4")
	nodes := h.nodes("job", "n0", "n1", "n2", "n3", "n4")
	h.waitRunning("job", 4, 0)
	first := h.plan("job")
	require.NotNil(t, first.Table)
	require.Greater(t, first.Table.Chunks, 1, "a table of several chunks")

	var member *simnode.Node
	for _, n := range nodes {
		if _, ok := n.Workload.Running(); ok && member == nil {
			member = n
		}
	}
	member.Crash() // the standby takes its place
	st := h.waitRunning("job", 4, first.Generation)
	p := h.plan("job")
	require.NotNil(t, p.Table)
	assert.Equal(t, st.Generation, p.Table.Generation, "the new table is stored under its own generation")
	for _, n := range nodes {
		if a, ok := n.Workload.Running(); ok {
			assert.Equal(t, p.Members, a.Plan.Members, "node %s runs the stored table", n.ID)
		}
	}
	resp, err := h.cli.Get(t.Context(), h.keys.Tables("job"), clientv3.WithPrefix())
	require.NoError(t, err)
	assert.Len(t, resp.Kvs, p.Table.Chunks, "only the table the plan names is kept")
}

// TestAJobTooLargeToStoreFailsSayingSo: a rank table beyond what a plan may
// name fails the job with that message, instead of a write retried for
// ever. (Chunks of a byte make 200 nodes too many.)
func TestAJobTooLargeToStoreFailsSayingSo(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", func(c *coordinator.Config) { c.TableChunkBytes = 1 })
	h.scale("job", "200")
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%03d", i)
	}
	h.nodes("job", ids...)
	st := h.waitStatus("job", "Failed", func(s membership.Status) bool { return s.Phase == membership.JobFailed })
	assert.Contains(t, st.Message, "rank table too large to store")
}

// TestManyEvictionsAreOneEvent: 140 nodes that never ack a stop are evicted
// together, with one event (a transaction holds at most 128 operations, so
// an event each could never be written), and the job runs again at its
// size once their sidecars registered anew.
func TestManyEvictionsAreOneEvent(t *testing.T) {
	h := newHarness(t)
	h.nodeTTL = 10 * time.Second // 150 nodes on a loaded machine: no lease lost by accident
	h.startCoordinator("c1", func(c *coordinator.Config) { c.StopTimeout = time.Second })
	h.scale("job", "150")
	ids := make([]string, 150)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%03d", i)
	}
	nodes := h.nodes("job", ids...)
	h.waitRunning("job", 150, 0)
	for _, n := range nodes[10:] {
		t.Cleanup(n.Workload.Hang())
	}
	require.True(t, nodes[0].Workload.Exit(1))
	h.waitRunning("job", 150, 1)
	var evicted []string
	events, err := h.client.Events(t.Context(), "job")
	require.NoError(t, err)
	for _, e := range events {
		if e.Type == "NodeEvicted" {
			evicted = append(evicted, e.Message)
		}
	}
	require.Len(t, evicted, 1, "one event for every node evicted")
	assert.Contains(t, evicted[0], "and 135 more did not ack the stop of generation 2")
}
