package coordinator

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// TestProgressCountedAsChangesArriveMatchesACount: the counters an ack
// updates in O(1) always equal a count from scratch, whatever the order of
// joins, acks, failures, leases lost, warmth and records gone.
func TestProgressCountedAsChangesArriveMatchesACount(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	states := []membership.NodeState{membership.NodeWaiting, membership.NodeStopped, membership.NodeRunning,
		membership.NodeSucceeded, membership.NodeFailed, membership.NodeLeaving}
	for round := range 20 {
		ids := make([]string, 12)
		var members []membership.Member
		for i := range ids {
			ids[i] = fmt.Sprintf("n%d", i)
			if i < 8 {
				members = append(members, membership.Member{Node: ids[i], Role: membership.RoleWorker, Rank: i, Host: "h", Ports: []int{1}, NProc: 1, Lease: int64(i + 1)})
			}
		}
		plan := &membership.Plan{Generation: 3, Phase: []membership.Phase{membership.PhaseStop, membership.PhaseRun}[round%2], Members: members}
		ix := newNodeIndex()
		ix.progressOf(1, plan)
		for step := range 300 {
			id := ids[rng.IntN(len(ids))]
			if rng.IntN(6) == 0 {
				ix.remove(id)
			} else {
				i := 0
				fmt.Sscanf(id, "n%d", &i)
				lease := int64(i + 1)
				if rng.IntN(5) == 0 {
					lease += 100 // back under another lease
				}
				ix.put(membership.LiveNode{Node: membership.Node{ID: id, Role: membership.RoleWorker, Host: "h", Ports: []int{1}, NProc: 1,
					State: states[rng.IntN(len(states))], Generation: int64(2 + rng.IntN(3)), Cold: rng.IntN(3) == 0},
					Lease: clientv3.LeaseID(lease), JoinRevision: int64(step)}, time.Now())
			}
			cold := 0
			for _, n := range ix.nodes {
				if n.Cold {
					cold++
				}
			}
			require.Equal(t, cold, ix.cold, "the cold nodes counted as they change")
			got := ix.progress
			want := progress{plan: plan, counted: true}
			want.recount(ix.nodes)
			require.Equal(t, want.present, got.present, "round %d step %d", round, step)
			require.Equal(t, want.acked, got.acked)
			require.Equal(t, want.ready, got.ready)
			require.Equal(t, want.workersDone, got.workersDone)
			require.Equal(t, want.rank0Done, got.rank0Done)
			require.Equal(t, want.failed, got.failed)
			require.Equal(t, want.lost, got.lost)
		}
	}
}

// TestASlowStopIsNotADeadOne: the stop timeout counts from the last ack, so
// a stop phase that takes longer than the timeout in all, with acks still
// coming, evicts no one; a node silent for the whole timeout after the
// last ack is evicted, with one event for every node evicted.
func TestASlowStopIsNotADeadOne(t *testing.T) {
	nodes := live("a", "b", "c", "d")
	run := runPlan(1, nodes)
	stop := &membership.Plan{Generation: 2, Phase: membership.PhaseStop, Members: run.Members, Reason: "x", StopAt: t0}
	ix := indexOf(in(nodes, membership.NodeRunning, 1))
	v := view{job: "j", spec: ptr(spec("4")), plan: stop, idx: ix, prog: ix.progressOf(1, stop)}
	m := memo{stopGen: 2, stopSeen: t0}

	acked := in(nodes, membership.NodeStopped, 2)
	ix.put(acked[0], t0.Add(20*time.Second))
	ix.put(acked[1], t0.Add(29*time.Second))
	d := decide(v, m, tm, t0.Add(31*time.Second))
	assert.Empty(t, d.evict, "acks came within the timeout of each other")
	assert.Equal(t, t0.Add(29*time.Second+tm.stopTimeout), d.wakeAt)

	d = decide(v, d.memo, tm, t0.Add(29*time.Second+tm.stopTimeout))
	require.Len(t, d.evict, 2)
	require.Len(t, d.events, 1, "one event for every node evicted")
	assert.Equal(t, "nodes c, d did not ack the stop of generation 2 within 30s of the last ack; evicted", d.events[0].Message)
}
