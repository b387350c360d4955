package coordinator

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// live builds nodes in join order: "a" joins first. A name with a role
// suffix, "p:ps", has that role.
func live(names ...string) []membership.LiveNode {
	out := make([]membership.LiveNode, len(names))
	for i, name := range names {
		role := membership.RoleWorker
		switch {
		case len(name) > 3 && name[len(name)-3:] == ":ps":
			name, role = name[:len(name)-3], membership.RolePS
		case len(name) > 6 && name[len(name)-6:] == ":sched":
			name, role = name[:len(name)-6], membership.RoleScheduler
		case len(name) > 6 && name[len(name)-6:] == ":heter":
			name, role = name[:len(name)-6], membership.RoleHeter
		}
		out[i] = membership.LiveNode{
			Node: membership.Node{ID: name, Role: role, Host: "h-" + name, Ports: []int{7000}, NProc: 1, MasterPort: 6000,
				State: membership.NodeWaiting},
			JoinRevision: int64(10 + i), Lease: leaseOf(name),
		}
	}
	return out
}

// prevTable is a previous table of workers: prevTable("a", "b") gives a
// rank 0 and b rank 1.
// withOrdinals gives each node an ordinal; -1 gives none.
func withOrdinals(nodes []membership.LiveNode, ordinals ...int) []membership.LiveNode {
	for i := range nodes {
		if ordinals[i] >= 0 {
			nodes[i].Ordinal = &ordinals[i]
		}
	}
	return nodes
}

// relet gives nodes a lease of another registration than prevTable's: they
// restarted, or fenced themselves and registered again.
func relet(nodes []membership.LiveNode, ids ...string) []membership.LiveNode {
	for i := range nodes {
		for _, id := range ids {
			if nodes[i].ID == id {
				nodes[i].Lease++
			}
		}
	}
	return nodes
}

// leaving marks nodes as leaving.
func leaving(nodes []membership.LiveNode, ids ...string) []membership.LiveNode {
	for i := range nodes {
		for _, id := range ids {
			if nodes[i].ID == id {
				nodes[i].State = membership.NodeLeaving
			}
		}
	}
	return nodes
}

func prevTable(names ...string) []membership.Member {
	out := make([]membership.Member, len(names))
	for i, n := range names {
		out[i] = membership.Member{Node: n, Role: membership.RoleWorker, Rank: i, Lease: int64(leaseOf(n))}
	}
	return out
}

// leaseOf is the lease the nodes of live hold, and the members of
// prevTable: a node of a previous table is a survivor under it.
func leaseOf(name string) clientv3.LeaseID {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return clientv3.LeaseID(100 + h.Sum32()%1_000_000)
}

func workerRanks(t table) map[string]int {
	out := map[string]int{}
	for _, m := range t.members {
		if m.Role == membership.RoleWorker {
			out[m.Node] = m.Rank
		}
	}
	return out
}

func spec(np string) membership.Spec {
	n, err := membership.ParseNP(np)
	if err != nil {
		panic(err)
	}
	return membership.DefaultSpec(n)
}

func TestAssignRanks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spec     membership.Spec
		live     []membership.LiveNode
		prev     []membership.Member
		excluded map[string]bool
		want     map[string]int
	}{
		{name: "first generation follows join order", spec: spec("3"), live: live("a", "b", "c"),
			want: map[string]int{"a": 0, "b": 1, "c": 2}},
		{name: "surplus nodes stay on standby", spec: spec("2"), live: live("a", "b", "c"),
			want: map[string]int{"a": 0, "b": 1}},
		{name: "survivors keep ranks, a newcomer fills the hole", spec: spec("3"), live: live("a", "c", "d"), prev: prevTable("a", "b", "c"),
			want: map[string]int{"a": 0, "d": 1, "c": 2}},
		{name: "scale-down moves tail ranks into holes", spec: spec("2"), live: live("a", "c", "d"), prev: prevTable("a", "b", "c", "d"),
			want: map[string]int{"a": 0, "c": 1}},
		{name: "scale-down prefers tail survivors over newcomers", spec: spec("3"), live: live("e", "a", "c", "d"), prev: prevTable("a", "b", "c", "d"),
			want: map[string]int{"a": 0, "d": 1, "c": 2}},
		{name: "scale-down without holes keeps the head", spec: spec("2"), live: live("a", "b", "c", "d"), prev: prevTable("a", "b", "c", "d"),
			want: map[string]int{"a": 0, "b": 1}},
		{name: "scale-up appends newcomers in join order", spec: spec("4"), live: live("a", "b", "d", "c"), prev: prevTable("a", "b"),
			want: map[string]int{"a": 0, "b": 1, "d": 2, "c": 3}},
		{name: "a range runs at its maximum", spec: spec("2:3"), live: live("a", "b", "c", "d", "e"), prev: prevTable("c", "d"),
			want: map[string]int{"c": 0, "d": 1, "a": 2}},
		{name: "an excluded node gives way to a standby", spec: spec("2"), live: live("a", "b", "c"), prev: prevTable("a", "b"), excluded: map[string]bool{"a": true},
			want: map[string]int{"c": 0, "b": 1}},
		{name: "an excluded node runs when no one else can", spec: spec("2"), live: live("a", "b"), prev: prevTable("a", "b"), excluded: map[string]bool{"a": true},
			want: map[string]int{"a": 0, "b": 1}},
		// A StatefulSet's pods joined in random order (Parallel); it keeps
		// the lowest ordinals when it shrinks, and so does the table.
		{name: "scale-down keeps the lowest ordinals when all have one", spec: spec("2"),
			live: withOrdinals(live("p3", "p1", "p0", "p2"), 3, 1, 0, 2), prev: prevTable("p3", "p1", "p0", "p2"),
			want: map[string]int{"p0": 0, "p1": 1}},
		{name: "without ordinals for all, the lowest old ranks stay", spec: spec("2"),
			live: withOrdinals(live("p3", "p1", "p0", "x"), 3, 1, 0, -1), prev: prevTable("p3", "p1", "p0", "x"),
			want: map[string]int{"p3": 0, "p1": 1}},
		{name: "ordinals never reorder a table that fits", spec: spec("4"),
			live: withOrdinals(live("p3", "p1", "p0", "p2"), 3, 1, 0, 2), prev: prevTable("p3", "p1", "p0", "p2"),
			want: map[string]int{"p3": 0, "p1": 1, "p0": 2, "p2": 3}},
		{name: "a first generation of a StatefulSet's pods is ranked by ordinal", spec: spec("3"),
			live: withOrdinals(live("p2", "p0", "p1"), 2, 0, 1), want: map[string]int{"p0": 0, "p1": 1, "p2": 2}},
		{name: "later, newcomers take the holes in join order, whatever their ordinals", spec: spec("3"),
			live: withOrdinals(live("p0", "p5", "p3", "p2"), 0, 5, 3, 2), prev: prevTable("p0", "p1"),
			want: map[string]int{"p0": 0, "p5": 1, "p3": 2}},
		{name: "a spare takes a lost member's rank; the member back under a new lease is the spare", spec: spec("2"),
			live: relet(withOrdinals(live("w0", "w2", "w1"), 0, 2, 1), "w1"), prev: prevTable("w0", "w1"),
			want: map[string]int{"w0": 0, "w2": 1}},
		{name: "a member back under a new lease with no spare takes its rank again", spec: spec("2"),
			live: relet(live("a", "b"), "b"), prev: prevTable("a", "b"),
			want: map[string]int{"a": 0, "b": 1}},
		{name: "a leaving node takes no rank", spec: spec("2"), live: leaving(live("a", "b", "c"), "a"), prev: prevTable("a", "b"),
			want: map[string]int{"b": 1, "c": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, short := assignRanks(tc.spec, tc.live, tc.prev, tc.excluded)
			require.Nil(t, short)
			assert.Equal(t, tc.want, workerRanks(got))
			again, _ := assignRanks(tc.spec, tc.live, tc.prev, tc.excluded)
			assert.Equal(t, got, again, "two computations of the same input agree")
		})
	}
}

func TestQuorum(t *testing.T) {
	withPS := spec("2")
	withPS.PS = 2
	withSched := spec("1")
	withSched.Schedulers = 1
	for _, tc := range []struct {
		name string
		spec membership.Spec
		live []membership.LiveNode
		want *shortage
	}{
		{"exact np met", spec("3"), live("a", "b", "c"), nil},
		{"exact np short", spec("3"), live("a", "b"), &shortage{role: membership.RoleWorker, have: 2, need: 3, available: 2}},
		{"range below min", spec("3:5"), live("a", "b"), &shortage{role: membership.RoleWorker, have: 2, need: 3, available: 2}},
		{"range at min", spec("2:5"), live("a", "b"), nil},
		{"ps short", withPS, live("a", "b", "p:ps"), &shortage{role: membership.RolePS, have: 1, need: 2, available: 1}},
		{"ps met", withPS, live("a", "p:ps", "b", "q:ps"), nil},
		{"ps nodes are not workers", withPS, live("a", "p:ps", "q:ps", "r:ps"), &shortage{role: membership.RoleWorker, have: 1, need: 2, available: 1}},
		{"scheduler missing", withSched, live("a"), &shortage{role: membership.RoleScheduler, have: 0, need: 1, available: 0}},
		{"scheduler present", withSched, live("s:sched", "a"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, short := assignRanks(tc.spec, tc.live, nil, nil)
			assert.Equal(t, tc.want, short)
		})
	}
}

func TestAssignRanksRolesAndGlobalRanks(t *testing.T) {
	s := spec("2")
	s.PS = 1
	nodes := live("p:ps", "a", "b")
	nodes[1].NProc, nodes[1].Ports = 2, []int{7000, 7001}
	nodes[2].NProc, nodes[2].Ports = 3, []int{7000, 7001, 7002}
	got, short := assignRanks(s, nodes, nil, nil)
	require.Nil(t, short)
	require.Len(t, got.members, 3)
	assert.Equal(t, membership.Member{Node: "a", Role: membership.RoleWorker, Rank: 0, GlobalRank: 0, Host: "h-a", Ports: []int{7000, 7001}, NProc: 2, Lease: int64(leaseOf("a"))}, got.members[0])
	assert.Equal(t, 2, got.members[1].GlobalRank, "b's first process follows a's two")
	assert.Equal(t, membership.RolePS, got.members[2].Role)
	assert.Equal(t, 0, got.members[2].Rank)
	assert.Equal(t, 5, got.worldSize, "world size counts worker processes")
	assert.Equal(t, "h-a:6000", got.master)

	// PaddlePaddle's heterogeneous trainers: an exact count, waited for,
	// ranked after the others and outside the world size.
	s.Heter = 1
	_, short = assignRanks(s, nodes, nil, nil)
	require.NotNil(t, short)
	assert.Equal(t, "waiting for nodes: 0 of 1 heter node", short.String())
	got, short = assignRanks(s, append(nodes, live("h:heter")...), nil, nil)
	require.Nil(t, short)
	require.Len(t, got.members, 4)
	assert.Equal(t, membership.RoleHeter, got.members[3].Role)
	assert.Equal(t, 5, got.worldSize)
}

// TestAssignRanksInvariants checks random inputs for the properties every
// table must have.
func TestAssignRanksInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		var names []string
		for j := 0; j < rng.IntN(12); j++ {
			names = append(names, fmt.Sprintf("n%d", j))
		}
		rng.Shuffle(len(names), func(a, b int) { names[a], names[b] = names[b], names[a] })
		nodes := live(names...)
		var prev []membership.Member
		for r, n := range rng.Perm(10)[:rng.IntN(8)] {
			id := fmt.Sprintf("n%d", n)
			prev = append(prev, membership.Member{Node: id, Role: membership.RoleWorker, Rank: r, Lease: int64(leaseOf(id))})
		}
		lo := 1 + rng.IntN(6)
		s := membership.DefaultSpec(membership.NP{Min: lo, Max: lo + rng.IntN(4)})
		excluded := map[string]bool{fmt.Sprintf("n%d", rng.IntN(12)): rng.IntN(2) == 0}

		got, short := assignRanks(s, nodes, prev, excluded)
		again, _ := assignRanks(s, nodes, prev, excluded)
		require.Equal(t, got, again)
		if len(nodes) < s.NP.Min {
			require.NotNil(t, short)
			continue
		}
		require.Nil(t, short)
		n := min(len(nodes), s.NP.Max)
		require.Len(t, got.members, n)
		seen := map[string]bool{}
		for r, m := range got.members {
			require.Equal(t, r, m.Rank, "ranks are 0..n-1 in order")
			require.False(t, seen[m.Node], "a node appears once")
			seen[m.Node] = true
		}
		ranks := workerRanks(got)
		alive := indexOf(nodes)
		for _, p := range prev {
			if _, ok := alive.lookup(p.Node); !ok || excluded[p.Node] || p.Rank >= n {
				continue
			}
			rank, ok := ranks[p.Node]
			require.True(t, ok, "survivor %s runs", p.Node)
			require.Equal(t, p.Rank, rank, "a survivor keeps a rank that still fits")
		}
	}
}
