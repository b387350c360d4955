package autoscale

import (
	"cmp"
	"hash/fnv"
	"math"
	"slices"
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
// freed, in hundredths (1 at least), times costPlaces, plus its node's
// place, a hash of the node's name, so that a ReplicaSet empties one
// node's batch before it starts another's of the same worth, and a node
// that joins or leaves moves no other node's costs. A pod whose going
// frees no worker costs noGainCost; one on a node that takes no pods
// (cordoned, not Ready) costs 0, the first to go.
const (
	costPlaces = 100_000
	maxPerGain = 9_999
	noGainCost = (maxPerGain + 1) * costPlaces
)

// place is a node's place among nodes of the same worth.
func place(node string) int32 {
	h := fnv.New32a()
	h.Write([]byte(node))
	return int32(h.Sum32() % costPlaces)
}

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
	for _, n := range nodes {
		if _, dup := free[n.Name]; !dup {
			free[n.Name] = n.Allocatable.Sub(n.Used)
		}
	}

	type group struct{ owner, node string }
	groups := map[group][]ReplicaPod{}
	costs := make(map[string]int32, len(pods))
	for _, p := range pods {
		if _, ok := free[p.Node]; !ok {
			costs[p.Name] = 0
			continue
		}
		g := group{p.Owner, p.Node}
		groups[g] = append(groups[g], p)
	}
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
					perGain := min(max(int32(math.Round(100*float64(r)/float64(gain))), 1), maxPerGain)
					cost, take = perGain*costPlaces, r
				}
			}
			// A node's later batches never go before its earlier ones.
			cost = max(cost+place(g.node), last)
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
