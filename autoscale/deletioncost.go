package autoscale

import (
	"cmp"
	"math"
	"slices"
	"sort"
)

// ReplicaPod is a pod of another workload's ReplicaSet (a Deployment's),
// bound to a node. When its ReplicaSet scales down, it deletes the pods of
// the lowest deletion cost first (the pod-deletion-cost annotation); left
// to itself it takes them from the nodes that hold most of its pods, which
// spreads the freed room over many nodes in holes too small for a worker.
type ReplicaPod struct {
	Name    string // namespace/name
	Owner   string // the ReplicaSet: costs order the pods of one owner
	Node    string
	Request Resources
}

// Costs of DeletionCosts: a pod's cost is its batch's pods per worker
// freed, in hundredths, times costNodes, plus its node's place among the
// nodes, so that a ReplicaSet empties one node's batch before it starts
// another's of the same worth. A pod whose going frees no worker costs
// noGainCost.
const (
	costNodes  = 1000
	maxPerGain = 99_999
	noGainCost = (maxPerGain + 1) * costNodes
)

// GrowthWorker is the request of the worker the next growth would place:
// that of the job that comes first among those below their maximum
// (priority, rank, least fulfilled, oldest). ok is false when no job may
// grow: then no room is worth steering.
func GrowthWorker(jobs []Job) (worker Resources, eligible map[string]bool, ok bool) {
	var best *jobState
	for i := range jobs {
		j := &jobState{Job: &jobs[i]}
		if j.current() >= j.Max || j.Worker.IsZero() {
			continue
		}
		if best == nil || precedence(j, best, j.current(), best.current()) < 0 {
			best = j
		}
	}
	if best == nil {
		return Resources{}, nil, false
	}
	return best.Worker, best.Eligible, true
}

// DeletionCosts gives each pod a deletion cost such that, whatever number
// of pods its ReplicaSet sheds, the pods it sheds free room for as many
// whole workers (of request worker, on the eligible nodes; nil is every
// node) as can be had: on each node, the pods are taken in batches, each
// the fewest that free the most workers per pod, and the batches of all
// nodes in order of that worth, a node's batch whole. The nodes' Used
// counts the pods themselves.
//
// Each ReplicaSet is ordered on its own, over the room as it is: another's
// scale-down meanwhile only adds room.
func DeletionCosts(nodes []Node, pods []ReplicaPod, worker Resources, eligible map[string]bool) map[string]int32 {
	if worker.IsZero() || len(pods) == 0 {
		return nil
	}
	free := make(map[string]Resources, len(nodes))
	place := make(map[string]int, len(nodes))
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if _, dup := free[n.Name]; !dup {
			free[n.Name] = n.Allocatable.Sub(n.Used)
			names = append(names, n.Name)
		}
	}
	sort.Strings(names)
	for i, name := range names {
		place[name] = i % costNodes
	}

	type group struct{ owner, node string }
	groups := map[group][]ReplicaPod{}
	for _, p := range pods {
		if _, ok := free[p.Node]; ok {
			g := group{p.Owner, p.Node}
			groups[g] = append(groups[g], p)
		}
	}
	costs := make(map[string]int32, len(pods))
	for g, on := range groups {
		slices.SortFunc(on, func(a, b ReplicaPod) int { return cmp.Compare(a.Name, b.Name) })
		room := free[g.node]
		usable := eligible == nil || eligible[g.node]
		last := int32(0)
		for len(on) > 0 {
			cost := int32(noGainCost)
			take := len(on)
			if usable {
				if r, gain := bestBatch(room, on, worker); gain > 0 {
					perGain := min(int32(math.Round(100*float64(r)/float64(gain))), maxPerGain)
					cost, take = perGain*costNodes, r
				}
			}
			// A node's later batches never go before its earlier ones.
			cost = max(cost+int32(place[g.node]), last)
			last = cost
			for _, p := range on[:take] {
				costs[p.Name] = cost
				room = room.Add(p.Request)
			}
			on = on[take:]
		}
	}
	return costs
}

// bestBatch is the fewest of the pods, taken in order, that free the most
// workers per pod on a node with room free, and the workers they free; 0
// workers if none does.
func bestBatch(free Resources, pods []ReplicaPod, worker Resources) (count, gain int) {
	before := fits(free, worker)
	room := free
	for r, p := range pods {
		room = room.Add(p.Request)
		g := fits(room, worker) - before
		// g/(r+1) > gain/count, without division.
		if g > 0 && (count == 0 || g*count > gain*(r+1)) {
			count, gain = r+1, g
		}
	}
	return count, gain
}

// fits is how many of worker fit in room.
func fits(room Resources, worker Resources) int {
	n := math.MaxInt
	for _, d := range [][2]int64{{room.MilliCPU, worker.MilliCPU}, {room.Memory, worker.Memory}, {room.GPU, worker.GPU}} {
		if d[1] > 0 {
			n = min(n, int(max(d[0], 0)/d[1]))
		}
	}
	return n
}
