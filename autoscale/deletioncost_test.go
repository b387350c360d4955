package autoscale_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/autoscale"
)

// fill puts n pods of owner on a node, counted as used there.
func fill(node *autoscale.Node, owner string, n int, req autoscale.Resources) []autoscale.ReplicaPod {
	var out []autoscale.ReplicaPod
	for i := range n {
		out = append(out, autoscale.ReplicaPod{Name: fmt.Sprintf("%s-%s-%d", owner, node.Name, i), Owner: owner, Node: node.Name, Request: req})
		node.Used = node.Used.Add(req)
	}
	return out
}

// shed is what a ReplicaSet scaled down by k deletes: the k pods of the
// lowest cost.
func shed(costs map[string]int32, pods []autoscale.ReplicaPod, k int) []autoscale.ReplicaPod {
	sorted := slices.Clone(pods)
	slices.SortStableFunc(sorted, func(a, b autoscale.ReplicaPod) int { return cmp.Compare(costs[a.Name], costs[b.Name]) })
	return sorted[:k]
}

// workersFreed is how many more workers fit once the pods are gone.
func workersFreed(ns []autoscale.Node, gone []autoscale.ReplicaPod, worker autoscale.Resources) int {
	count := func(extra map[string]autoscale.Resources) int {
		n := 0
		for _, node := range ns {
			room := node.Allocatable.Sub(node.Used).Add(extra[node.Name])
			for room.Fits(worker) {
				room = room.Sub(worker)
				n++
			}
		}
		return n
	}
	extra := map[string]autoscale.Resources{}
	for _, p := range gone {
		extra[p.Node] = extra[p.Node].Add(p.Request)
	}
	return count(extra) - count(nil)
}

func TestAScaleDownShedsThePodsThatFreeWholeWorkers(t *testing.T) {
	// The seed's case 2 in small: nginx (3 CPU) packed on nodes of 17 and
	// 18 CPU, trainers of 5 CPU to grow.
	ns := []autoscale.Node{{Name: "a", Allocatable: cpus(18)}, {Name: "b", Allocatable: cpus(17)}, {Name: "c", Allocatable: cpus(18)}}
	var pods []autoscale.ReplicaPod
	pods = append(pods, fill(&ns[0], "web", 6, nginx)...)
	pods = append(pods, fill(&ns[1], "web", 5, nginx)...) // 2 CPU free
	pods = append(pods, fill(&ns[2], "web", 6, nginx)...)
	costs := autoscale.DeletionCosts(ns, pods, trainer, nil)
	require.Len(t, costs, len(pods))

	// One pod of b frees a trainer; then five of a node of 18 free three.
	first := shed(costs, pods, 1)
	assert.Equal(t, "b", first[0].Node)
	assert.Equal(t, 1, workersFreed(ns, first, trainer))
	six := shed(costs, pods, 6)
	assert.Equal(t, 4, workersFreed(ns, six, trainer), "b's pod and five of one node of 18")
	for k := 1; k <= len(pods); k++ {
		// Never worse than the most even spread, which a ReplicaSet makes
		// of pods of the same cost.
		even := spread(pods, k)
		assert.GreaterOrEqual(t, workersFreed(ns, shed(costs, pods, k), trainer), workersFreed(ns, even, trainer), "shedding %d", k)
	}
	// A node's batch goes whole before another node's batch of the same worth.
	eleven := shed(costs, pods, 11)
	byNode := map[string]int{}
	for _, p := range eleven {
		byNode[p.Node]++
	}
	assert.Equal(t, map[string]int{"a": 5, "b": 1, "c": 5}, byNode)
}

// spread is k pods taken one a node in turn, from the nodes that hold most.
func spread(pods []autoscale.ReplicaPod, k int) []autoscale.ReplicaPod {
	left := map[string][]autoscale.ReplicaPod{}
	var nodes []string
	for _, p := range pods {
		if left[p.Node] == nil {
			nodes = append(nodes, p.Node)
		}
		left[p.Node] = append(left[p.Node], p)
	}
	var out []autoscale.ReplicaPod
	for len(out) < k {
		slices.SortStableFunc(nodes, func(a, b string) int { return cmp.Compare(len(left[b]), len(left[a])) })
		n := nodes[0]
		out = append(out, left[n][0])
		left[n] = left[n][1:]
	}
	return out
}

func TestDeletionCostsOrderEachReplicaSetAndKeepToTheWorkersNodes(t *testing.T) {
	ns := []autoscale.Node{{Name: "a", Allocatable: cpus(12)}, {Name: "b", Allocatable: cpus(12)}}
	var pods []autoscale.ReplicaPod
	pods = append(pods, fill(&ns[0], "web", 2, nginx)...)
	pods = append(pods, fill(&ns[0], "api", 2, nginx)...)
	pods = append(pods, fill(&ns[1], "web", 4, nginx)...)

	// Workers may go to b only: a's pods free nothing and go last.
	costs := autoscale.DeletionCosts(ns, pods, cpus(6), map[string]bool{"b": true})
	for _, p := range pods {
		if p.Node == "a" {
			assert.Greater(t, costs[p.Name], costs["web-b-0"], p.Name)
		}
	}
	// Every node: api's two pods on a free one worker of 6 CPU between
	// them, as web's two there do; each ReplicaSet is ordered alone.
	costs = autoscale.DeletionCosts(ns, pods, cpus(6), nil)
	assert.Equal(t, costs["web-a-0"], costs["web-a-1"])
	assert.Equal(t, costs["api-a-0"], costs["web-a-0"])

	// Memory can be what a worker lacks: on a node with the CPU of one
	// but no memory, one pod going frees one.
	tight := []autoscale.Node{{Name: "m", Allocatable: autoscale.Resources{MilliCPU: 16000, Memory: 12 << 30}}}
	mem := fill(&tight[0], "web", 4, nginx) // 12 CPU, 12 Gi: 4 CPU free, no memory
	costs = autoscale.DeletionCosts(tight, mem, autoscale.Resources{MilliCPU: 4000, Memory: 3 << 30}, nil)
	assert.Equal(t, 1, workersFreed(tight, shed(costs, mem, 1), autoscale.Resources{MilliCPU: 4000, Memory: 3 << 30}))

	assert.Nil(t, autoscale.DeletionCosts(ns, pods, autoscale.Resources{}, nil), "no worker to make room for")

	// A pod on a node that takes no pods (cordoned, not Ready: not in the
	// snapshot) goes first.
	gone := append(slices.Clone(pods), autoscale.ReplicaPod{Name: "web-x-0", Owner: "web", Node: "x", Request: nginx})
	costs = autoscale.DeletionCosts(ns, gone, cpus(6), nil)
	assert.Equal(t, "web-x-0", shed(costs, gone, 1)[0].Name)
}

func TestGrowthWorkerIsTheNextJobToGrow(t *testing.T) {
	big := autoscale.Resources{MilliCPU: 8000}
	jobs := []autoscale.Job{
		{ID: "full", Min: 1, Max: 2, Target: 2, Worker: big, Priority: 10},
		{ID: "low", Min: 1, Max: 4, Target: 1, Worker: trainer},
		{ID: "high", Min: 1, Max: 4, Target: 3, Worker: cpus(2), Priority: 5},
	}
	w, _, ok := autoscale.GrowthWorker(jobs)
	require.True(t, ok)
	assert.Equal(t, cpus(2), w, "the highest priority below its maximum, however fulfilled")
	_, _, ok = autoscale.GrowthWorker(jobs[:1])
	assert.False(t, ok, "no job below its maximum")
}
