package autoscale_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/autoscale"
)

var (
	t0      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	trainer = autoscale.Resources{MilliCPU: 5000, Memory: 8 << 30}
	nginx   = autoscale.Resources{MilliCPU: 3000, Memory: 3 << 30}
)

func cpus(n float64) autoscale.Resources {
	return autoscale.Resources{MilliCPU: int64(n * 1000), Memory: 64 << 30}
}

// nodes returns n nodes of the given allocatable CPUs, nothing on them.
func nodes(n int, cpu float64) []autoscale.Node {
	out := make([]autoscale.Node, n)
	for i := range out {
		out[i] = autoscale.Node{Name: fmt.Sprintf("node-%03d", i), Allocatable: cpus(cpu)}
	}
	return out
}

// placeWorkers binds k workers of job j on the nodes, first fit, and counts
// them as used there.
func placeWorkers(ns []autoscale.Node, j *autoscale.Job, k int) {
	for n := range ns {
		for len(j.Placed) < k && ns[n].Allocatable.Sub(ns[n].Used).Fits(j.Worker) {
			ns[n].Used = ns[n].Used.Add(j.Worker)
			j.Placed = append(j.Placed, autoscale.Worker{Node: ns[n].Name, Ordinal: len(j.Placed)})
		}
	}
}

func decide(t *testing.T, cfg autoscale.Config, s autoscale.Snapshot, now time.Time) autoscale.Plan {
	t.Helper()
	p, err := autoscale.New(cfg)
	require.NoError(t, err)
	return p.Decide(s, now)
}

func targets(plan autoscale.Plan) map[string]int {
	out := map[string]int{}
	for _, d := range plan.Decisions {
		out[d.Job] = d.To
	}
	return out
}

func TestAWorkerCountsOnlyWhereItsWholeRequestFits(t *testing.T) {
	// Five nodes with 4 CPU free each: 20 CPU in all, room for four
	// trainers by a sum, for none by fit.
	ns := nodes(5, 4)
	job := autoscale.Job{ID: "a", Min: 1, Max: 10, Target: 1, Worker: trainer, Created: t0}
	plan := decide(t, autoscale.Config{}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{job}}, t0)
	assert.Empty(t, plan.Decisions)
	assert.Equal(t, 1, plan.Desired["a"])

	// Memory and GPUs count too.
	gpuNodes := []autoscale.Node{
		{Name: "g1", Allocatable: autoscale.Resources{MilliCPU: 32000, Memory: 256 << 30, GPU: 8}},
		{Name: "g2", Allocatable: autoscale.Resources{MilliCPU: 32000, Memory: 256 << 30, GPU: 2}},
	}
	gpuJob := autoscale.Job{ID: "g", Min: 1, Max: 10, Target: 1, Created: t0,
		Worker: autoscale.Resources{MilliCPU: 4000, Memory: 16 << 30, GPU: 4}}
	placeWorkers(gpuNodes, &gpuJob, 1)
	plan = decide(t, autoscale.Config{}, autoscale.Snapshot{Nodes: gpuNodes, Jobs: []autoscale.Job{gpuJob}}, t0)
	assert.Equal(t, map[string]int{"g": 2}, targets(plan), "4 GPUs left on g1, 2 on g2: one more worker")
}

func TestGrowthJumpsToTheTargetInOneStep(t *testing.T) {
	ns := nodes(10, 16) // three trainers a node
	job := autoscale.Job{ID: "a", Min: 2, Max: 60, Target: 2, Worker: trainer, Created: t0}
	placeWorkers(ns, &job, 2)
	plan := decide(t, autoscale.Config{}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{job}}, t0)
	require.Len(t, plan.Decisions, 1)
	assert.Equal(t, autoscale.Decision{Job: "a", From: 2, To: 30, Reason: "28 more workers fit"}, plan.Decisions[0], "growth can wait for the room to settle")
}

func TestGrowthWaitsForTheCooldownAndTheMinimumGain(t *testing.T) {
	ns := nodes(10, 16)
	job := autoscale.Job{ID: "a", Min: 2, Max: 60, Target: 20, Worker: trainer, Created: t0, Changed: t0}
	placeWorkers(ns, &job, 20)
	cfg := autoscale.Config{Cooldown: time.Minute, MinGainFraction: 0.1}

	plan := decide(t, cfg, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{job}}, t0.Add(30*time.Second))
	assert.Empty(t, plan.Decisions)
	assert.Equal(t, "growth waits for the cooldown, until 00:01:00", plan.HeldBack["a"])
	plan = decide(t, cfg, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{job}}, t0.Add(time.Minute))
	assert.Equal(t, map[string]int{"a": 30}, targets(plan))

	// One more worker for a job of 20 is below 10 %: not worth a restart.
	small := nodes(7, 16) // 21 trainers
	job.Placed = nil
	placeWorkers(small, &job, 20)
	plan = decide(t, cfg, autoscale.Snapshot{Nodes: small, Jobs: []autoscale.Job{job}}, t0.Add(time.Hour))
	assert.Empty(t, plan.Decisions)
	assert.Equal(t, 20, plan.Desired["a"])
	assert.Equal(t, "growth to 21 adds 1 worker, less than the minimum gain of 2", plan.HeldBack["a"])

	// Unless it takes the job to its maximum: its last growth, whose room
	// would otherwise stay idle.
	job.Max = 21
	plan = decide(t, cfg, autoscale.Snapshot{Nodes: small, Jobs: []autoscale.Job{job}}, t0.Add(time.Hour))
	assert.Equal(t, map[string]int{"a": 21}, targets(plan))
}

func TestPodsOfAHigherPriorityGetRoomFromTheLowestPriorityMostFulfilledJobs(t *testing.T) {
	ns := nodes(10, 15) // three trainers a node, 30 in all
	low := autoscale.Job{ID: "low", Min: 2, Max: 20, Target: 10, Worker: trainer, Priority: 0, Created: t0, Changed: t0}
	full := autoscale.Job{ID: "full", Min: 2, Max: 10, Target: 10, Worker: trainer, Priority: 0, Created: t0, Changed: t0}
	high := autoscale.Job{ID: "high", Min: 2, Max: 20, Target: 10, Worker: trainer, Priority: 10, Created: t0, Changed: t0}
	placeWorkers(ns, &high, 10)
	placeWorkers(ns, &low, 10)
	placeWorkers(ns, &full, 10)
	var pending []autoscale.Pod
	for i := range 15 {
		pending = append(pending, autoscale.Pod{Name: fmt.Sprintf("nginx-%d", i), Priority: 1000, Request: nginx})
	}
	// Within the cooldown: shrinking for a higher priority never waits.
	plan := decide(t, autoscale.Config{Cooldown: time.Hour},
		autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{low, full, high}, Pending: pending}, t0.Add(time.Second))
	got := targets(plan)
	// 15 nginx pods need 45 CPU: nine trainers' room at best, one a pod
	// at worst. "full" (fulfillment 1) gives first, until it is no more
	// fulfilled than "low"; "high" keeps its ten.
	assert.Equal(t, 10, plan.Desired["high"], "the job of a higher priority keeps its workers")
	freed := 20 - plan.Desired["full"] - plan.Desired["low"]
	assert.GreaterOrEqual(t, freed, 9)
	assert.LessOrEqual(t, freed, 15)
	assert.Less(t, got["full"], 10)
	assert.GreaterOrEqual(t, got["full"], 2)
	assert.Greater(t, 10-got["full"], 10-plan.Desired["low"], "the most fulfilled gave more")
	for _, d := range plan.Decisions {
		assert.Contains(t, d.Reason, "room for pending pod nginx-")
		assert.True(t, d.Urgent, "room for a higher priority is made at once")
	}
	assert.Empty(t, plan.Unplaceable)
}

func TestNoJobShrinksBelowItsMinimumOrForNothing(t *testing.T) {
	ns := nodes(2, 15)
	a := autoscale.Job{ID: "a", Min: 3, Max: 6, Target: 6, Worker: trainer, Created: t0}
	placeWorkers(ns, &a, 6)
	// Twelve 3-CPU pods need 36 CPU; shrinking "a" to its minimum frees 15.
	var pending []autoscale.Pod
	for i := range 12 {
		pending = append(pending, autoscale.Pod{Name: fmt.Sprintf("nginx-%02d", i), Priority: 1000, Request: nginx})
	}
	plan := decide(t, autoscale.Config{}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{a}, Pending: pending}, t0)
	assert.Equal(t, map[string]int{"a": 3}, targets(plan), "down to its minimum for the five pods that then fit")
	assert.Len(t, plan.Unplaceable, 7)

	// A pod that would not fit even then takes nothing.
	huge := []autoscale.Pod{{Name: "huge", Priority: 1000, Request: cpus(40)}}
	plan = decide(t, autoscale.Config{}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{a}, Pending: huge}, t0)
	assert.Empty(t, plan.Decisions)
	assert.Equal(t, []string{"huge"}, plan.Unplaceable)
}

func TestANewJobReachesItsMinimumBeforeOthersGrow(t *testing.T) {
	ns := nodes(10, 15)
	old := autoscale.Job{ID: "old", Min: 2, Max: 60, Target: 30, Worker: trainer, Created: t0, Changed: t0}
	placeWorkers(ns, &old, 30)
	fresh := autoscale.Job{ID: "new", Min: 2, Max: 60, Target: 2, Worker: trainer, Created: t0.Add(time.Minute)}
	ps := []autoscale.Pod{
		{Name: "new-ps-0", Job: "new", Request: autoscale.Resources{MilliCPU: 4000, Memory: 5 << 30}},
		{Name: "new-ps-1", Job: "new", Request: autoscale.Resources{MilliCPU: 4000, Memory: 5 << 30}},
	}
	plan := decide(t, autoscale.Config{Cooldown: time.Hour},
		autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{old, fresh}, Pending: ps}, t0.Add(2*time.Minute))
	// Two workers and two 4-CPU servers: 18 CPU, four trainers' room
	// taken from the old job, whatever its cooldown.
	assert.Equal(t, 26, targets(plan)["old"])
	assert.Equal(t, 2, plan.Desired["new"])
	for _, d := range plan.Decisions {
		if d.Job == "old" {
			assert.Contains(t, d.Reason, "room for job new to reach its minimum of 2")
			assert.True(t, d.Urgent, "room for a job's minimum is made at once")
		}
	}
}

func TestIdleRoomIsSharedByFulfillmentThenPriorityComesFirst(t *testing.T) {
	ns := nodes(10, 15) // 30 trainers
	a := autoscale.Job{ID: "a", Min: 2, Max: 60, Target: 2, Worker: trainer, Created: t0}
	b := autoscale.Job{ID: "b", Min: 2, Max: 60, Target: 2, Worker: trainer, Created: t0.Add(time.Second)}
	placeWorkers(ns, &a, 2)
	placeWorkers(ns, &b, 2)
	plan := decide(t, autoscale.Config{}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{a, b}}, t0)
	assert.Equal(t, map[string]int{"a": 15, "b": 15}, targets(plan))

	b.Rank = 1
	plan = decide(t, autoscale.Config{}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{a, b}}, t0)
	assert.Equal(t, map[string]int{"b": 28}, targets(plan), "the job of a higher rank grows first")
	b.Rank, a.Priority = 0, 1
	plan = decide(t, autoscale.Config{}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{a, b}}, t0)
	assert.Equal(t, map[string]int{"a": 28}, targets(plan), "the job of a higher priority grows first")
}

func TestAJobWithoutATargetGetsOneAtOnce(t *testing.T) {
	ns := nodes(4, 15)
	j := autoscale.Job{ID: "a", Min: 2, Max: 60, Worker: trainer, Created: t0, Changed: t0}
	placeWorkers(ns, &j, 5)
	plan := decide(t, autoscale.Config{Cooldown: time.Hour}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{j}}, t0)
	assert.Equal(t, map[string]int{"a": 12}, targets(plan))
}

func TestRoomAJobMayNotTakeYetGoesToAnother(t *testing.T) {
	ns := nodes(4, 15) // 12 trainers
	cooling := autoscale.Job{ID: "cooling", Min: 2, Max: 60, Target: 2, Worker: trainer, Created: t0, Changed: t0}
	ready := autoscale.Job{ID: "ready", Min: 2, Max: 8, Target: 2, Worker: trainer, Created: t0.Add(time.Second)}
	placeWorkers(ns, &cooling, 2)
	placeWorkers(ns, &ready, 2)
	plan := decide(t, autoscale.Config{Cooldown: time.Minute}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{cooling, ready}}, t0.Add(time.Second))
	assert.Equal(t, map[string]int{"ready": 8}, targets(plan), "the room goes to the job that may grow")
	assert.Equal(t, "growth waits for the cooldown, until 00:01:00", plan.HeldBack["cooling"])
}

func TestWorkersNotYetPlacedKeepTheirClaim(t *testing.T) {
	ns := nodes(10, 15) // 30 trainers
	grown := autoscale.Job{ID: "grown", Min: 2, Max: 60, Target: 20, Worker: trainer, Created: t0, Changed: t0}
	placeWorkers(ns, &grown, 2) // 18 of its pods not bound yet
	fresh := autoscale.Job{ID: "fresh", Min: 2, Max: 60, Target: 2, Worker: trainer, Created: t0.Add(time.Second)}
	plan := decide(t, autoscale.Config{Cooldown: time.Minute}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{grown, fresh}}, t0.Add(time.Second))
	assert.Equal(t, map[string]int{"fresh": 10}, targets(plan), "the new job grows into the room left; the grown job keeps its twenty")
	assert.Equal(t, 20, plan.Desired["grown"])
}

func TestBadConfigIsRefused(t *testing.T) {
	for _, cfg := range []autoscale.Config{{Cooldown: -1}, {MinGain: -1}, {MinGainFraction: 2}} {
		_, err := autoscale.New(cfg)
		assert.Error(t, err)
	}
}

func TestOnlyTheNodesAPodMayGoToCount(t *testing.T) {
	ns := nodes(4, 15)
	gpuOnly := map[string]bool{ns[0].Name: true, ns[1].Name: true}
	j := autoscale.Job{ID: "a", Min: 1, Max: 60, Target: 1, Worker: trainer, Created: t0, Eligible: gpuOnly}
	placeWorkers(ns[:1], &j, 1)
	plan := decide(t, autoscale.Config{}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{j}}, t0)
	assert.Equal(t, map[string]int{"a": 6}, targets(plan), "two nodes of three trainers; the other two are not its")

	// A pending pod pinned to a node takes the job's workers there; they
	// come back on the node it may also go to.
	ns = nodes(4, 15)
	j = autoscale.Job{ID: "a", Min: 1, Max: 60, Target: 3, Worker: trainer, Created: t0,
		Eligible: map[string]bool{ns[0].Name: true, ns[1].Name: true}, Placed: []autoscale.Worker{
			{Node: ns[1].Name, Ordinal: 0}, {Node: ns[0].Name, Ordinal: 1}, {Node: ns[0].Name, Ordinal: 2}}}
	ns[0].Used, ns[1].Used = trainer.Add(trainer), trainer
	pinned := autoscale.Pod{Name: "pinned", Priority: 1000, Request: autoscale.Resources{MilliCPU: 12000}, Eligible: map[string]bool{ns[0].Name: true}}
	plan = decide(t, autoscale.Config{}, autoscale.Snapshot{Nodes: ns, Jobs: []autoscale.Job{j}, Pending: []autoscale.Pod{pinned}}, t0)
	assert.Equal(t, 3, plan.Desired["a"], "down to one for the pod, back to three on node 1")
	assert.Empty(t, plan.Unplaceable)
}
