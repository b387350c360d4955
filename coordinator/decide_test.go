package coordinator

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

var (
	t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tm = timing{settle: time.Second, stopTimeout: 30 * time.Second}
)

func ptr[T any](v T) *T { return &v }

// runPlan is generation gen in phase run over the nodes, ranked in order.
func runPlan(gen int64, nodes []membership.LiveNode) *membership.Plan {
	s := spec("1")
	s.NP = membership.NP{Min: len(nodes), Max: len(nodes)}
	t, short := assignRanks(s, nodes, nil, nil)
	if short != nil {
		panic(short.String())
	}
	return &membership.Plan{Generation: gen, Phase: membership.PhaseRun, Members: t.members, WorldSize: t.worldSize,
		Master: t.master, DetectedAt: t0.Add(-time.Second), RunAt: t0.Add(-time.Second)}
}

// in sets every node's state for a generation.
func in(nodes []membership.LiveNode, state membership.NodeState, gen int64) []membership.LiveNode {
	out := append([]membership.LiveNode(nil), nodes...)
	for i := range out {
		out[i].State, out[i].Generation = state, gen
	}
	return out
}

func TestDecideFirstGeneration(t *testing.T) {
	t.Run("waits for np nodes", func(t *testing.T) {
		d := decide(view{job: "j", spec: ptr(spec("3")), nodes: live("a", "b")}, memo{}, tm, t0)
		assert.Nil(t, d.plan)
		require.NotNil(t, d.status)
		assert.Equal(t, membership.JobWaiting, d.status.Phase)
		assert.Equal(t, "waiting for nodes: 2 of 3 worker nodes", d.status.Message)
		assert.Equal(t, 2, d.status.Ready)
	})
	t.Run("runs when np nodes are there, without a stop phase", func(t *testing.T) {
		d := decide(view{job: "j", spec: ptr(spec("3")), nodes: live("a", "b", "c")}, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, int64(1), d.plan.Generation)
		assert.Equal(t, membership.PhaseRun, d.plan.Phase)
		assert.Len(t, d.plan.Members, 3)
		assert.Equal(t, membership.JobRestarting, d.status.Phase)
		assert.Equal(t, []string{"GenerationStarting"}, types(d.events))
	})
	t.Run("a range below its maximum settles first", func(t *testing.T) {
		v := view{job: "j", spec: ptr(spec("2:4")), nodes: live("a", "b")}
		d := decide(v, memo{}, tm, t0)
		assert.Nil(t, d.plan)
		assert.Equal(t, t0.Add(time.Second), d.wakeAt)
		assert.Equal(t, t0, d.memo.pendingSince)

		d = decide(v, d.memo, tm, t0.Add(time.Second))
		require.NotNil(t, d.plan)
		assert.Len(t, d.plan.Members, 2)
		assert.Equal(t, t0, d.plan.DetectedAt, "the wait counts from when the run first became possible")
	})
	t.Run("a range at its maximum runs at once", func(t *testing.T) {
		d := decide(view{job: "j", spec: ptr(spec("2:3")), nodes: live("a", "b", "c")}, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Len(t, d.plan.Members, 3)
	})
	t.Run("no spec: a job with nodes waits, a deleted job is left alone", func(t *testing.T) {
		d := decide(view{job: "j", nodes: live("a")}, memo{}, tm, t0)
		assert.Nil(t, d.plan)
		assert.Equal(t, membership.JobWaiting, d.status.Phase)
		d = decide(view{job: "j"}, memo{}, tm, t0)
		assert.Equal(t, decision{}, d)
	})
	t.Run("an invalid spec fails the job", func(t *testing.T) {
		d := decide(view{job: "j", specErr: errors.New("bad np"), nodes: live("a")}, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.JobFailed, d.plan.Result)
		assert.Equal(t, membership.JobFailed, d.status.Phase)
		assert.Equal(t, "invalid spec: bad np", d.status.Message)
	})
}

func TestDecideStopPhase(t *testing.T) {
	nodes := live("a", "b")
	run := runPlan(1, nodes)
	stop := &membership.Plan{Generation: 2, Phase: membership.PhaseStop, Members: run.Members, Reason: "x", StopAt: t0}

	t.Run("waits for the previous members to ack", func(t *testing.T) {
		v := view{job: "j", spec: ptr(spec("2")), plan: stop, nodes: []membership.LiveNode{in(nodes, membership.NodeStopped, 2)[0], in(nodes, membership.NodeRunning, 1)[1]}}
		d := decide(v, memo{}, tm, t0.Add(time.Second))
		assert.Nil(t, d.plan)
		assert.Empty(t, d.evict)
		assert.Equal(t, t0.Add(tm.stopTimeout), d.wakeAt)
		assert.Equal(t, "stopping generation 1 for generation 2: x", d.status.Message)

		d = decide(v, memo{}, tm, t0.Add(tm.stopTimeout))
		require.Len(t, d.evict, 1, "a node that never acks is evicted")
		assert.Equal(t, "b", d.evict[0].ID)
		assert.Equal(t, []string{"NodeEvicted"}, types(d.events))
	})
	t.Run("a waiting member must ack too", func(t *testing.T) {
		// It may have started generation 1 without having said so yet.
		v := view{job: "j", spec: ptr(spec("2")), plan: stop, nodes: in(nodes, membership.NodeWaiting, 0)}
		d := decide(v, memo{}, tm, t0)
		assert.Nil(t, d.plan)
		assert.Equal(t, membership.JobRestarting, d.status.Phase)
	})
	t.Run("a restarted member needs no ack", func(t *testing.T) {
		restarted := in(nodes, membership.NodeStopped, 2)
		restarted[1].Lease, restarted[1].State, restarted[1].Generation = 999, membership.NodeWaiting, 0
		d := decide(view{job: "j", spec: ptr(spec("2")), plan: stop, nodes: restarted}, memo{}, tm, t0.Add(time.Second))
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseRun, d.plan.Phase)
		assert.Equal(t, int64(2), d.plan.Generation)
		assert.Equal(t, int64(999), d.plan.Members[1].Lease, "the table names the node's new lease")
	})
	t.Run("all acked: phase run with the steps' timestamps", func(t *testing.T) {
		d := decide(view{job: "j", spec: ptr(spec("2")), plan: stop, nodes: in(nodes, membership.NodeStopped, 2)}, memo{}, tm, t0.Add(time.Second))
		require.NotNil(t, d.plan)
		assert.Equal(t, t0, d.plan.StopAt)
		assert.Equal(t, t0.Add(time.Second), d.plan.AckedAt)
		assert.Equal(t, t0.Add(time.Second), d.plan.RunAt)
	})
}

func TestDecideRunPhase(t *testing.T) {
	nodes := live("a", "b")
	run := runPlan(1, nodes)
	base := func(s membership.Spec, n []membership.LiveNode) view {
		return view{job: "j", spec: &s, plan: run, nodes: n}
	}

	t.Run("all members running: Running, with steps, once", func(t *testing.T) {
		v := base(spec("2"), in(nodes, membership.NodeRunning, 1))
		d := decide(v, memo{}, tm, t0)
		assert.Nil(t, d.plan)
		assert.Equal(t, membership.JobRunning, d.status.Phase)
		require.NotNil(t, d.status.Steps)
		assert.Equal(t, membership.Duration(time.Second), d.status.Steps.Start)
		assert.Equal(t, []string{"GenerationRunning"}, types(d.events))

		v.status = d.status
		d = decide(v, memo{}, tm, t0.Add(time.Minute))
		assert.Empty(t, d.events)
		assert.True(t, sameStatus(d.status, v.status), "nothing to write while nothing changes")
	})
	t.Run("a lost member: stop, without spending the budget", func(t *testing.T) {
		d := decide(base(spec("2"), in(nodes, membership.NodeRunning, 1)[:1]), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseStop, d.plan.Phase)
		assert.Equal(t, int64(2), d.plan.Generation)
		assert.Equal(t, 0, d.plan.Restarts)
		assert.Equal(t, "member b lost", d.plan.Reason)
	})
	t.Run("a lost member at fault tolerance 0 fails the job", func(t *testing.T) {
		s := spec("2")
		s.FaultTolerance = 0
		d := decide(base(s, in(nodes, membership.NodeRunning, 1)[:1]), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.JobFailed, d.plan.Result)
	})
	t.Run("a failed child spends the budget, then fails the job", func(t *testing.T) {
		failed := in(nodes, membership.NodeRunning, 1)
		failed[1].State, failed[1].ExitCode = membership.NodeFailed, 7
		d := decide(base(spec("2"), failed), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseStop, d.plan.Phase)
		assert.Equal(t, 1, d.plan.Restarts)

		spent := *run
		spent.Restarts = membership.DefaultMaxRestarts
		v := base(spec("2"), failed)
		v.plan = &spent
		d = decide(v, memo{}, tm, t0)
		assert.Equal(t, membership.JobFailed, d.plan.Result)
		assert.Equal(t, 7, d.plan.ExitCode)
	})
	t.Run("the first failure reported is the cause", func(t *testing.T) {
		failed := in(nodes, membership.NodeFailed, 1)
		failed[0].ExitCode, failed[0].ModRevision = 1, 20 // rank 0 lost its peer
		failed[1].ExitCode, failed[1].ModRevision = 137, 19
		d := decide(base(spec("2"), failed), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, "node b (worker rank 1) failed with exit code 137", d.plan.Reason)
		assert.Equal(t, 1, d.plan.Restarts, "one restart for the whole generation")
	})
	t.Run("a failure of an earlier generation is ignored", func(t *testing.T) {
		old := in(nodes, membership.NodeRunning, 1)
		old[1].State, old[1].Generation = membership.NodeFailed, 0
		d := decide(base(spec("2"), old), memo{}, tm, t0)
		assert.Nil(t, d.plan)
	})
	t.Run("a newcomer beyond an exact np stays on standby", func(t *testing.T) {
		d := decide(base(spec("2"), in(live("a", "b", "c"), membership.NodeRunning, 1)), memo{}, tm, t0)
		assert.Nil(t, d.plan)
	})
	t.Run("a newcomer under a range restarts after the settle window", func(t *testing.T) {
		v := base(spec("2:4"), in(live("a", "b", "c"), membership.NodeRunning, 1))
		d := decide(v, memo{}, tm, t0)
		assert.Nil(t, d.plan)
		assert.Equal(t, t0.Add(time.Second), d.wakeAt)
		d = decide(v, d.memo, tm, t0.Add(time.Second))
		require.NotNil(t, d.plan)
		assert.Equal(t, "membership change: 2 → 3 workers", d.plan.Reason)
	})
	t.Run("a scale to more nodes than there are keeps running", func(t *testing.T) {
		d := decide(base(spec("4"), in(nodes, membership.NodeRunning, 1)), memo{}, tm, t0)
		assert.Nil(t, d.plan)
		assert.Equal(t, membership.JobRunning, d.status.Phase)
		assert.Equal(t, "np 4: waiting for nodes: 2 of 4 worker nodes; generation 1 keeps running", d.status.Message)
	})
	t.Run("success policies", func(t *testing.T) {
		oneDone := in(nodes, membership.NodeRunning, 1)
		oneDone[0].State = membership.NodeSucceeded
		d := decide(base(spec("2"), oneDone), memo{}, tm, t0)
		assert.Nil(t, d.plan, "AllWorkers waits for every worker")

		rank0 := spec("2")
		rank0.SuccessPolicy = membership.SuccessRank0
		d = decide(base(rank0, oneDone), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.JobSucceeded, d.plan.Result)

		d = decide(base(spec("2"), in(nodes, membership.NodeSucceeded, 1)), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.JobSucceeded, d.plan.Result)
		assert.Equal(t, 0, d.plan.ExitCode)
	})
	t.Run("a finished job stays finished", func(t *testing.T) {
		final := &membership.Plan{Generation: 2, Phase: membership.PhaseStop, Result: membership.JobSucceeded, Reason: "done"}
		d := decide(view{job: "j", spec: ptr(spec("2")), plan: final, nodes: live("a", "b", "c")}, memo{}, tm, t0)
		assert.Nil(t, d.plan)
		assert.Equal(t, membership.JobSucceeded, d.status.Phase)
	})
}

func types(events []membership.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Type)
	}
	return out
}
