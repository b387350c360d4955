package coordinator

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

// cold marks nodes as cold: their next start would not find warm
// interpreters ready.
func cold(nodes []membership.LiveNode, ids ...string) []membership.LiveNode {
	for i := range nodes {
		for _, id := range ids {
			if nodes[i].ID == id {
				nodes[i].Cold = true
			}
		}
	}
	return nodes
}

func TestAssignWarmRanks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spec     membership.Spec
		live     []membership.LiveNode
		prev     []membership.Member
		excluded map[string]bool
		want     map[string]int
	}{
		{name: "a cold member's rank goes to the warm spare, and the member is the spare", spec: spec("2"),
			live: cold(live("a", "b", "c"), "b"), prev: prevTable("a", "b"), want: map[string]int{"a": 0, "c": 1}},
		{name: "without a spare the cold member keeps its rank", spec: spec("2"),
			live: cold(live("a", "b"), "b"), prev: prevTable("a", "b"), want: map[string]int{"a": 0, "b": 1}},
		{name: "a spare as cold as the member changes nothing", spec: spec("2"),
			live: cold(live("a", "b", "c"), "b", "c"), prev: prevTable("a", "b"), want: map[string]int{"a": 0, "b": 1}},
		{name: "two cold members and one warm spare: nothing moves, the generation waits for a cold start anyway", spec: spec("2"),
			live: cold(live("a", "b", "c"), "a", "b"), prev: prevTable("a", "b"), want: map[string]int{"a": 0, "b": 1}},
		{name: "two cold members and two warm spares: lowest rank first, to the spare that waited longest", spec: spec("3"),
			live: cold(live("a", "b", "c", "d", "e"), "a", "c"), prev: prevTable("a", "b", "c"),
			want: map[string]int{"d": 0, "b": 1, "e": 2}},
		{name: "a lost member's rank goes to a warm spare before one still warming", spec: spec("2"),
			live: cold(live("a", "c", "d"), "c"), prev: prevTable("a", "b"), want: map[string]int{"a": 0, "d": 1}},
		{name: "a spare still warming takes a lost member's rank when no other can", spec: spec("2"),
			live: cold(live("a", "c"), "c"), prev: prevTable("a", "b"), want: map[string]int{"a": 0, "c": 1}},
		{name: "a lost member and a cold one, one warm spare: the lost rank is filled, the cold member stays", spec: spec("3"),
			live: cold(live("a", "b", "d"), "b"), prev: prevTable("a", "b", "c"), want: map[string]int{"a": 0, "b": 1, "d": 2}},
		{name: "an excluded node takes no cold member's rank", spec: spec("2"),
			live: cold(live("a", "b", "c"), "b"), prev: prevTable("a", "b"), excluded: map[string]bool{"c": true},
			want: map[string]int{"a": 0, "b": 1}},
		{name: "a scale-up takes the warm newcomers first", spec: spec("3"),
			live: cold(live("a", "b", "c", "d"), "c"), prev: prevTable("a", "b"), want: map[string]int{"a": 0, "b": 1, "d": 2}},
		{name: "a first generation is ranked as always", spec: spec("2"),
			live: cold(live("a", "b", "c"), "a"), want: map[string]int{"a": 0, "b": 1}},
		{name: "warm nodes keep their ranks", spec: spec("2"),
			live: live("a", "b", "c"), prev: prevTable("a", "b"), want: map[string]int{"a": 0, "b": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, short := assignWarmRanks(tc.spec, tc.live, tc.prev, tc.excluded)
			require.Nil(t, short)
			assert.Equal(t, tc.want, workerRanks(got))
			again, _ := assignWarmRanks(tc.spec, tc.live, tc.prev, tc.excluded)
			assert.Equal(t, got, again, "two computations of the same input agree")
		})
	}
}

func TestAssignWarmRanksMovesTheMaster(t *testing.T) {
	nodes := cold(live("a", "b", "c"), "a")
	nodes[2].NProc, nodes[2].Ports = 2, []int{7000, 7001}
	got, short := assignWarmRanks(spec("2"), nodes, prevTable("a", "b"), nil)
	require.Nil(t, short)
	require.Len(t, got.members, 2)
	assert.Equal(t, "c", got.members[0].Node)
	assert.Equal(t, "h-c:6000", got.master, "rank 0's node serves the store")
	assert.Equal(t, 2, got.members[1].GlobalRank, "b's process follows c's two")
	assert.Equal(t, 3, got.worldSize)
}

// TestAssignWarmRanksInvariants checks random inputs: ranks move only to
// make every rank warm, and without a cold node the table is
// assignRanks'.
func TestAssignWarmRanksInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 2000; i++ {
		var names []string
		for j := 0; j < rng.IntN(10); j++ {
			names = append(names, fmt.Sprintf("n%d", j))
		}
		nodes := live(names...)
		for k := range nodes {
			nodes[k].Cold = rng.IntN(3) == 0
		}
		var prev []membership.Member
		for r, n := range rng.Perm(10)[:rng.IntN(8)] {
			id := fmt.Sprintf("n%d", n)
			prev = append(prev, membership.Member{Node: id, Role: membership.RoleWorker, Rank: r, Lease: int64(leaseOf(id))})
		}
		lo := 1 + rng.IntN(5)
		s := membership.DefaultSpec(membership.NP{Min: lo, Max: lo + rng.IntN(3)})
		excluded := map[string]bool{fmt.Sprintf("n%d", rng.IntN(10)): rng.IntN(2) == 0}

		got, short := assignWarmRanks(s, nodes, prev, excluded)
		blind, _ := assignRanks(s, nodes, prev, excluded)
		if short != nil {
			continue
		}
		require.Len(t, got.members, len(blind.members))
		ix := indexOf(nodes)
		seen := map[string]bool{}
		allWarm := true
		for r, m := range got.members {
			require.Equal(t, r, m.Rank, "ranks are 0..n-1 in order")
			require.False(t, seen[m.Node], "a node appears once")
			seen[m.Node] = true
			n, _ := ix.lookup(m.Node)
			allWarm = allWarm && !n.Cold
		}
		if len(prev) == 0 || ix.cold == 0 {
			require.Equal(t, blind, got, "a first generation, or one without a cold node, is assignRanks'")
			continue
		}
		for r, m := range blind.members {
			n, _ := ix.lookup(m.Node)
			switch {
			case !isSurvivor(m, prev):
			case !n.Cold:
				require.Equal(t, m.Node, got.members[r].Node, "a warm survivor keeps its rank")
			case got.members[r].Node != m.Node:
				require.True(t, allWarm, "cold survivor %s gave its rank away though not every rank is warm", m.Node)
			}
		}
	}
}

// isSurvivor reports whether m holds the rank it held in prev.
func isSurvivor(m membership.Member, prev []membership.Member) bool {
	for _, p := range prev {
		if p.Node == m.Node && p.Rank == m.Rank && p.Lease == m.Lease {
			return true
		}
	}
	return false
}

// A generation stopped for a member whose guard died, its warm
// interpreters with it, starts on the warm spare instead; a node's warmth
// alone never restarts a running generation.
func TestDecideGivesAColdMembersRankToAWarmSpare(t *testing.T) {
	nodes := live("a", "b", "c")
	run := runPlan(1, nodes[:2])
	stop := &membership.Plan{Generation: 2, Phase: membership.PhaseStop, Members: run.Members, Reason: "node b failed",
		Failure: &membership.Failure{Node: "b", Role: membership.RoleWorker, Rank: 1, ExitCode: 137}, StopAt: t0}

	t.Run("the warm spare takes the cold member's rank", func(t *testing.T) {
		acked := cold(in(nodes, membership.NodeStopped, 2), "b")
		acked[2].State, acked[2].Generation = membership.NodeWaiting, 0
		d := decide(view{job: "j", spec: ptr(spec("2")), plan: stop, nodes: acked}, memo{}, tm, t0.Add(time.Second))
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseRun, d.plan.Phase)
		assert.Equal(t, map[string]int{"a": 0, "c": 1}, memberRanks(d.plan.Members))
		assert.Equal(t, 1, d.plan.Restarts, "the failure is charged as before")
	})
	t.Run("a cold spare leaves the member its rank", func(t *testing.T) {
		acked := cold(in(nodes, membership.NodeStopped, 2), "b", "c")
		acked[2].State, acked[2].Generation = membership.NodeWaiting, 0
		d := decide(view{job: "j", spec: ptr(spec("2")), plan: stop, nodes: acked}, memo{}, tm, t0.Add(time.Second))
		require.NotNil(t, d.plan)
		assert.Equal(t, map[string]int{"a": 0, "b": 1}, memberRanks(d.plan.Members))
	})
	t.Run("a running member's warmth restarts nothing", func(t *testing.T) {
		running := cold(in(nodes, membership.NodeRunning, 1), "b")
		running[2].State, running[2].Generation = membership.NodeWaiting, 0
		d := decide(view{job: "j", spec: ptr(spec("2")), plan: run, nodes: running}, memo{}, tm, t0)
		assert.Nil(t, d.plan)
		assert.Equal(t, membership.JobRunning, d.status.Phase)
	})
	t.Run("the table the spare took stands once it runs", func(t *testing.T) {
		acked := cold(in(nodes, membership.NodeStopped, 2), "b")
		acked[2].State, acked[2].Generation = membership.NodeWaiting, 0
		d := decide(view{job: "j", spec: ptr(spec("2")), plan: stop, nodes: acked}, memo{}, tm, t0.Add(time.Second))
		require.NotNil(t, d.plan)
		running := in(acked, membership.NodeRunning, 2)
		running[1].State, running[1].Cold = membership.NodeStopped, false // warm again, standing by
		d = decide(view{job: "j", spec: ptr(spec("2")), plan: d.plan, nodes: running}, memo{}, tm, t0.Add(2*time.Second))
		assert.Nil(t, d.plan, "the former member, warm again, is the spare")
		assert.Equal(t, membership.JobRunning, d.status.Phase)
	})
}

func memberRanks(members []membership.Member) map[string]int {
	out := map[string]int{}
	for _, m := range members {
		out[m.Node] = m.Rank
	}
	return out
}

// starting marks nodes whose trainer is being started ahead (--in-place):
// cold, and holding no rank until it is ready.
func starting(nodes []membership.LiveNode, ids ...string) []membership.LiveNode {
	for i := range nodes {
		for _, id := range ids {
			if nodes[i].ID == id {
				nodes[i].Cold, nodes[i].Starting = true, true
			}
		}
	}
	return nodes
}

// A node whose trainer is still starting ahead stands by while np's
// minimum is met without it, in both placements; otherwise it is ranked as
// a cold node is.
func TestANodeStillStartingStandsByWhileTheMinimumIsMet(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec membership.Spec
		live []membership.LiveNode
		prev []membership.Member
		want map[string]int
	}{
		{name: "np 1:2: the survivor trains alone", spec: spec("1:2"),
			live: starting(live("a", "b"), "b"), prev: prevTable("a", "b"), want: map[string]int{"a": 0}},
		{name: "np 1:2: ready again, it is taken back", spec: spec("1:2"),
			live: live("a", "b"), prev: prevTable("a"), want: map[string]int{"a": 0, "b": 1}},
		{name: "np 2 and a started spare: the spare takes the rank", spec: spec("2"),
			live: starting(live("a", "b", "c"), "b"), prev: prevTable("a", "b"), want: map[string]int{"a": 0, "c": 1}},
		{name: "np 2 and no spare: the job waits for it", spec: spec("2"),
			live: starting(live("a", "b"), "b"), prev: prevTable("a", "b"), want: map[string]int{"a": 0, "b": 1}},
		{name: "a first generation of nodes all starting waits for them", spec: spec("1:2"),
			live: starting(live("a", "b"), "a", "b"), want: map[string]int{"a": 0, "b": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, place := range []func(membership.Spec, []membership.LiveNode, []membership.Member, map[string]bool) (table, *shortage){assignRanks, assignWarmRanks} {
				got, short := place(tc.spec, tc.live, tc.prev, nil)
				require.Nil(t, short)
				assert.Equal(t, tc.want, workerRanks(got))
			}
		})
	}
}
