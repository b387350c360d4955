package coordinator

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

var (
	t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tm = limits{settle: time.Second, stopTimeout: 30 * time.Second}
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
	t.Run("a job whose only spec is malformed waits, failing nothing", func(t *testing.T) {
		d := decide(view{job: "j", specErr: errors.New("bad np"), nodes: live("a")}, memo{}, tm, t0)
		assert.Nil(t, d.plan)
		assert.Equal(t, membership.JobWaiting, d.status.Phase)
		assert.Equal(t, "the spec is malformed (bad np); waiting for a valid one", d.status.Message)
	})
	t.Run("a malformed spec over a good one changes nothing", func(t *testing.T) {
		nodes := in(live("a", "b"), membership.NodeRunning, 1)
		good := spec("2")
		v := view{job: "j", spec: &good, specErr: errors.New("bad np"), plan: runPlan(1, live("a", "b")), nodes: nodes}
		d := decide(v, memo{}, tm, t0)
		assert.Nil(t, d.plan, "the generation stands")
		assert.Equal(t, membership.JobRunning, d.status.Phase)
	})
	t.Run("a plan that cannot be read, and no good one before, holds the job", func(t *testing.T) {
		running := &membership.Status{Phase: membership.JobRunning, Generation: 4, Members: 2}
		good := spec("2")
		d := decide(view{job: "j", spec: &good, planErr: errors.New("garbage"), status: running, nodes: live("a", "b")}, memo{}, tm, t0)
		assert.Nil(t, d.plan)
		assert.Equal(t, membership.JobRunning, d.status.Phase)
		assert.Equal(t, int64(4), d.status.Generation)
		assert.Contains(t, d.status.Message, "the plan cannot be read (garbage)")
	})
}

func TestDecideStopPhase(t *testing.T) {
	nodes := live("a", "b")
	run := runPlan(1, nodes)
	stop := &membership.Plan{Generation: 2, Phase: membership.PhaseStop, Members: run.Members, Reason: "x", StopAt: t0}

	t.Run("waits for the previous members to ack", func(t *testing.T) {
		v := view{job: "j", spec: ptr(spec("2")), plan: stop, nodes: []membership.LiveNode{in(nodes, membership.NodeStopped, 2)[0], in(nodes, membership.NodeRunning, 1)[1]}}
		d := decide(v, memo{stopGen: 2, stopSeen: t0}, tm, t0.Add(time.Second))
		assert.Nil(t, d.plan)
		assert.Empty(t, d.evict)
		assert.Equal(t, t0.Add(tm.stopTimeout), d.wakeAt)
		assert.Equal(t, "stopping generation 1 for generation 2: x", d.status.Message)

		d = decide(v, d.memo, tm, t0.Add(tm.stopTimeout))
		require.Len(t, d.evict, 1, "a node that never acks is evicted")
		assert.Equal(t, "b", d.evict[0].ID)
		assert.Equal(t, []string{"NodeEvicted"}, types(d.events))

		// The eviction failed (etcd refused it): it is tried again, and
		// not told again.
		d = decide(v, d.memo, tm, t0.Add(tm.stopTimeout+time.Second))
		require.Len(t, d.evict, 1, "a failed eviction is tried again")
		assert.Empty(t, d.events, "the node's eviction was told already")
	})
	t.Run("the stop timeout counts on this leader's clock, not from the plan's time", func(t *testing.T) {
		// The plan was written by a leader whose wall clock was an hour
		// ahead, or long ago by one that failed over.
		old := *stop
		old.StopAt = t0.Add(-time.Hour)
		v := view{job: "j", spec: ptr(spec("2")), plan: &old, nodes: []membership.LiveNode{in(nodes, membership.NodeStopped, 2)[0], in(nodes, membership.NodeRunning, 1)[1]}}
		d := decide(v, memo{}, tm, t0)
		assert.Empty(t, d.evict, "a new leader gives the node its whole stop timeout")
		assert.Equal(t, t0.Add(tm.stopTimeout), d.wakeAt)
		d = decide(v, d.memo, tm, t0.Add(tm.stopTimeout))
		assert.Len(t, d.evict, 1)
	})
	t.Run("an evicted member is waited for until its record expires", func(t *testing.T) {
		v := view{job: "j", spec: ptr(spec("1")), plan: stop, nodes: in(nodes, membership.NodeStopped, 2)[:1],
			evictions: []membership.Eviction{{Node: "b", Lease: stop.Members[1].Lease, TTLSeconds: 5}}}
		d := decide(v, memo{}, tm, t0)
		assert.Nil(t, d.plan, "b's processes may run until its own deadline")
		assert.Equal(t, t0.Add(goneRecheck), d.wakeAt, "a lease not known gone is asked about again")
		v.evictions = nil
		d = decide(v, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseRun, d.plan.Phase)
	})
	t.Run("an evicted member is waited for until its time on the leader's clock", func(t *testing.T) {
		lease := stop.Members[1].Lease
		v := view{job: "j", spec: ptr(spec("1")), plan: stop, nodes: in(nodes, membership.NodeStopped, 2)[:1],
			evictions: []membership.Eviction{{Node: "b", Lease: lease, TTLSeconds: 5}},
			goneAt:    map[int64]time.Time{lease: t0}}
		d := decide(v, memo{}, tm, t0)
		assert.Nil(t, d.plan, "b's processes may run until its own deadline")
		assert.Equal(t, t0.Add(6*time.Second), d.wakeAt, "the actor wakes when b is certainly fenced: gone + TTL + 1 s")
		d = decide(v, memo{}, tm, t0.Add(6*time.Second))
		require.NotNil(t, d.plan, "the record need not have expired")
		assert.Equal(t, membership.PhaseRun, d.plan.Phase)
	})
	t.Run("an evicted member is waited for though a node of its name registered again", func(t *testing.T) {
		// The pod of a StatefulSet deleted by force comes back under the
		// same name at once, on another machine: the evicted one may still
		// run its processes until its own deadline.
		again := in(nodes, membership.NodeWaiting, 0)
		again[1].Lease = 999
		v := view{job: "j", spec: ptr(spec("2")), plan: stop, nodes: []membership.LiveNode{in(nodes, membership.NodeStopped, 2)[0], again[1]},
			evictions: []membership.Eviction{{Node: "b", Lease: stop.Members[1].Lease, TTLSeconds: 5}}}
		d := decide(v, memo{}, tm, t0)
		assert.Nil(t, d.plan, "b's old processes may run until its own deadline")
		v.evictions = nil
		d = decide(v, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseRun, d.plan.Phase)
	})
	t.Run("an evicted member its next sidecar took over is fenced at once", func(t *testing.T) {
		// The sidecar was killed; the leader evicted its lease for a
		// stop it never acked; its next sidecar on the same machine killed
		// what the guard left, saw none of it left, and took the node back.
		lease := stop.Members[1].Lease
		again := in(nodes, membership.NodeWaiting, 0)
		again[1].Lease = 999
		v := view{job: "j", spec: ptr(spec("2")), plan: stop, nodes: []membership.LiveNode{in(nodes, membership.NodeStopped, 2)[0], again[1]},
			evictions: []membership.Eviction{{Node: "b", Lease: lease, TTLSeconds: 5}},
			goneAt:    map[int64]time.Time{lease: t0}}
		d := decide(v, memo{}, tm, t0)
		assert.Nil(t, d.plan, "without the takeover, b's processes may run until its own deadline")
		v.takenOver = []evictionID{{"b", lease}}
		d = decide(v, memo{}, tm, t0)
		require.NotNil(t, d.plan, "the takeover says they are dead")
		assert.Equal(t, membership.PhaseRun, d.plan.Phase)
		assert.Equal(t, int64(999), d.plan.Members[1].Lease, "b is back under its new lease")
		assert.True(t, d.wakeAt.IsZero(), "nothing to ask about the taken-over lease: %v", d.wakeAt)

		// Another lease of b, or another node, taken over, says nothing
		// of this one.
		for _, other := range []evictionID{{"b", 999}, {"a", lease}} {
			v.takenOver = []evictionID{other}
			d = decide(v, memo{}, tm, t0)
			assert.Nil(t, d.plan, "taken over: %+v", other)
		}
	})
	t.Run("an eviction of the node's next lease does not hide the member's own", func(t *testing.T) {
		v := view{job: "j", spec: ptr(spec("1")), plan: stop, nodes: in(nodes, membership.NodeStopped, 2)[:1],
			evictions: []membership.Eviction{
				{Node: "b", Lease: 999, TTLSeconds: 5},
				{Node: "b", Lease: stop.Members[1].Lease, TTLSeconds: 5},
			}}
		d := decide(v, memo{}, tm, t0)
		assert.Nil(t, d.plan, "b's processes of the stopped generation may run until their own deadline")
	})
	t.Run("an eviction of an earlier lease is moot", func(t *testing.T) {
		v := view{job: "j", spec: ptr(spec("1")), plan: stop, nodes: in(nodes, membership.NodeStopped, 2)[:1],
			evictions: []membership.Eviction{{Node: "b", Lease: 12345, TTLSeconds: 5}}}
		d := decide(v, memo{}, tm, t0)
		require.NotNil(t, d.plan)
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
		assert.Equal(t, 1, d.plan.Interruptions, "a lost member is an interruption, though not charged")
		assert.Equal(t, 1, d.status.Interruptions)
		assert.Equal(t, "member b lost", d.plan.Reason)

		// The next generation keeps the count.
		stop := d.plan
		d = decide(view{job: "j", spec: ptr(spec("1")), plan: stop, nodes: in(nodes, membership.NodeStopped, 2)[:1]}, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseRun, d.plan.Phase)
		assert.Equal(t, 1, d.plan.Interruptions)
	})
	t.Run("a change of membership is no interruption", func(t *testing.T) {
		d := decide(base(spec("3"), in(live("a", "b", "c"), membership.NodeRunning, 1)), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseStop, d.plan.Phase)
		assert.Equal(t, 0, d.plan.Interruptions)
	})
	t.Run("a lost member at fault tolerance 0 is a membership change too", func(t *testing.T) {
		s := spec("2")
		s.FaultTolerance = 0
		d := decide(base(s, in(nodes, membership.NodeRunning, 1)[:1]), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseStop, d.plan.Phase)
		assert.Empty(t, d.plan.Result)
	})
	t.Run("a leaving member is a membership change at once", func(t *testing.T) {
		leaving := in(nodes, membership.NodeRunning, 1)
		leaving[1].State = membership.NodeLeaving
		d := decide(base(spec("2"), leaving), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, "member b lost", d.plan.Reason)
		assert.Nil(t, d.plan.Failure)
	})
	t.Run("a command that cannot start fails the job at once, spending nothing", func(t *testing.T) {
		failed := in(nodes, membership.NodeRunning, 1)
		failed[1].State, failed[1].ExitCode, failed[1].CannotStart = membership.NodeFailed, 127, true
		failed[1].Message = "training command trian.py: not found in PATH"
		d := decide(base(spec("2"), failed), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.JobFailed, d.plan.Result)
		assert.Equal(t, 127, d.plan.ExitCode)
		assert.Equal(t, 0, d.plan.Restarts)
		assert.Equal(t, "node b: training command trian.py: not found in PATH", d.plan.Reason)
	})
	t.Run("a failure stops the generation; its charge waits for the stop's end", func(t *testing.T) {
		failed := in(nodes, membership.NodeRunning, 1)
		failed[1].State, failed[1].ExitCode = membership.NodeFailed, 7
		d := decide(base(spec("2"), failed), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseStop, d.plan.Phase)
		assert.Equal(t, 0, d.plan.Restarts)
		require.NotNil(t, d.plan.Failure)
		assert.Equal(t, membership.Failure{Node: "b", Role: membership.RoleWorker, Rank: 1, ExitCode: 7}, *d.plan.Failure)

		// Every member acked: a real failure, charged.
		stop := d.plan
		d = decide(view{job: "j", spec: ptr(spec("2")), plan: stop, nodes: in(nodes, membership.NodeStopped, 2)}, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseRun, d.plan.Phase)
		assert.Equal(t, 1, d.plan.Restarts)
		assert.Equal(t, 1, d.plan.Interruptions)

		// The budget spent: the job fails with the child's code.
		spent := *stop
		spent.Restarts = membership.DefaultMaxRestarts
		d = decide(view{job: "j", spec: ptr(spec("2")), plan: &spent, nodes: in(nodes, membership.NodeStopped, 2)}, memo{}, tm, t0)
		assert.Equal(t, membership.JobFailed, d.plan.Result)
		assert.Equal(t, 7, d.plan.ExitCode)

		// Fault tolerance 0: the job fails.
		s := spec("2")
		s.FaultTolerance = 0
		d = decide(view{job: "j", spec: &s, plan: stop, nodes: in(nodes, membership.NodeStopped, 2)}, memo{}, tm, t0)
		assert.Equal(t, membership.JobFailed, d.plan.Result)
		assert.Equal(t, 7, d.plan.ExitCode)

		// Only some exit codes retried (MSJob's restartPolicy ExitCode):
		// 7 is not one of them, 137 would be.
		s = spec("2")
		s.RetryableExitCodes = []int{130, 137, 138, 143}
		d = decide(view{job: "j", spec: &s, plan: stop, nodes: in(nodes, membership.NodeStopped, 2)}, memo{}, tm, t0)
		assert.Equal(t, membership.JobFailed, d.plan.Result)
		assert.Contains(t, d.plan.Reason+d.status.Message, "exit code 7 is not one a restart answers")
		retried := *stop
		retried.Failure = &membership.Failure{Node: "b", Role: membership.RoleWorker, Rank: 1, ExitCode: 137}
		d = decide(view{job: "j", spec: &s, plan: &retried, nodes: in(nodes, membership.NodeStopped, 2)}, memo{}, tm, t0)
		assert.Equal(t, membership.PhaseRun, d.plan.Phase)
		assert.Equal(t, 1, d.plan.Restarts)
	})
	t.Run("a failure explained by a member lost during the stop costs nothing", func(t *testing.T) {
		failed := in(nodes, membership.NodeRunning, 1)
		failed[1].State, failed[1].ExitCode = membership.NodeFailed, 1
		d := decide(base(spec("2"), failed), memo{}, tm, t0)
		stop := d.plan
		require.NotNil(t, stop.Failure)
		for _, level := range []int{0, 1, 2} {
			s := spec("1")
			s.FaultTolerance = level
			// a died silently; b's collective failed because of it.
			onlyB := in(nodes, membership.NodeStopped, 2)[1:]
			d = decide(view{job: "j", spec: &s, plan: stop, nodes: onlyB}, memo{}, tm, t0)
			require.NotNil(t, d.plan, "level %d", level)
			assert.Equal(t, membership.PhaseRun, d.plan.Phase, "level %d", level)
			assert.Equal(t, 0, d.plan.Restarts, "level %d", level)
			assert.Empty(t, d.plan.Excluded, "level %d: the healthy peer is not benched", level)
			assert.Equal(t, "node b (worker rank 1) failed with exit code 1; not charged: member a lost meanwhile", d.plan.Reason)
		}
	})
	t.Run("the first failure reported is the cause", func(t *testing.T) {
		failed := in(nodes, membership.NodeFailed, 1)
		failed[0].ExitCode, failed[0].ModRevision = 1, 20 // rank 0 lost its peer
		failed[1].ExitCode, failed[1].ModRevision = 137, 19
		d := decide(base(spec("2"), failed), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, "node b (worker rank 1) failed with exit code 137", d.plan.Reason)
		require.NotNil(t, d.plan.Failure)
		assert.Equal(t, "b", d.plan.Failure.Node)

		s := spec("2")
		s.FaultTolerance = membership.FaultToleranceReplace
		d = decide(view{job: "j", spec: &s, plan: d.plan, nodes: in(live("a", "b", "c"), membership.NodeStopped, 2)}, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, 1, d.plan.Restarts, "one restart for the whole generation")
		assert.Equal(t, []string{"b"}, d.plan.Excluded, "only the cause is benched")
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
	t.Run("a finished job's status names the last generation that ran, not the final plan's", func(t *testing.T) {
		// Generation 1 ran and succeeded: the final plan is generation 2,
		// which only stops the sidecars.
		d := decide(base(spec("2"), in(nodes, membership.NodeSucceeded, 1)), memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, int64(2), d.plan.Generation)
		assert.Equal(t, int64(1), d.status.Generation)
		require.Len(t, d.events, 1)
		assert.Equal(t, membership.Event{Generation: 1, Type: "JobSucceeded", Message: "all 2 workers succeeded"}, d.events[0])

		// Generation 1 failed at fault tolerance 0: the stop plan is
		// generation 2, the final plan 3; generation 1 is the last that ran.
		failed := in(nodes, membership.NodeRunning, 1)
		failed[1].State, failed[1].ExitCode = membership.NodeFailed, 7
		s := spec("2")
		s.FaultTolerance = 0
		stop := decide(base(s, failed), memo{}, tm, t0).plan
		require.NotNil(t, stop)
		assert.Equal(t, int64(2), stop.Generation)
		d = decide(view{job: "j", spec: &s, plan: stop, nodes: in(nodes, membership.NodeStopped, 2)}, memo{}, tm, t0)
		require.Equal(t, membership.JobFailed, d.plan.Result)
		assert.Equal(t, int64(3), d.plan.Generation)
		assert.Equal(t, int64(1), d.status.Generation)

		// Told again from the final plan, by this leader or the next, the
		// status keeps it; without one written, the plan before the final.
		final := d.plan
		again := decide(view{job: "j", spec: &s, plan: final, status: d.status}, memo{}, tm, t0)
		assert.Equal(t, int64(1), again.status.Generation)
		again = decide(view{job: "j", spec: &s, plan: final}, memo{}, tm, t0)
		assert.Equal(t, int64(2), again.status.Generation)
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

// TestDecideFailsAJobWhoseTableCannotBeStored: the table-size limit is an
// argument of the decision, which fails the job, saying why, instead of
// leaving the actor a plan that no write can store.
func TestDecideFailsAJobWhoseTableCannotBeStored(t *testing.T) {
	ids := make([]string, 200) // chunks of a byte make 200 nodes too many
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%03d", i)
	}
	v := view{job: "j", spec: ptr(spec("200")), nodes: live(ids...)}
	d := decide(v, memo{}, tm, t0)
	require.NotNil(t, d.stored, "a plan is returned encoded")
	assert.Equal(t, membership.PhaseRun, d.plan.Phase)
	assert.Same(t, &d.stored.Plan, d.plan)

	tiny := tm
	tiny.tableChunkBytes = 1 // every byte a chunk: more than a plan may name
	d = decide(v, memo{}, tiny, t0)
	require.NoError(t, d.err)
	require.ErrorIs(t, d.tooLarge, membership.ErrTableTooLarge)
	require.NotNil(t, d.plan)
	assert.Equal(t, membership.JobFailed, d.plan.Result)
	assert.Contains(t, d.status.Message, "rank table too large to store")
	require.NotNil(t, d.stored, "the final plan is stored instead")
}

// TestDecideOnlyReadsTheIndex: a decision changes nothing the actor holds;
// what it remembers (the rank table, by revision) comes back in its memo.
func TestDecideOnlyReadsTheIndex(t *testing.T) {
	nodes := live("a", "b", "c")
	run := runPlan(1, nodes)
	ix := indexOf(in(nodes, membership.NodeRunning, 1))
	v := view{job: "j", spec: ptr(spec("3")), specRev: 5, plan: run, planRev: 7, idx: ix, prog: ix.progressOf(7, run)}
	snapshot := func() nodeIndex {
		c := *ix
		c.nodes, c.roles = maps.Clone(ix.nodes), maps.Clone(ix.roles)
		c.progress.failed, c.progress.lost = maps.Clone(ix.progress.failed), maps.Clone(ix.progress.lost)
		return c
	}
	before := snapshot()
	d := decide(v, memo{}, tm, t0)
	assert.Equal(t, before, snapshot(), "the index is as it was")
	require.True(t, d.memo.ranks.valid, "the rank table is remembered")
	assert.Equal(t, ranksKey{version: ix.version, specRev: 5, planRev: 7}, d.memo.ranks.key)

	// Another spec revision is another table; a view made by hand (no
	// revisions) is never remembered.
	v.specRev = 6
	d = decide(v, d.memo, tm, t0)
	assert.Equal(t, int64(6), d.memo.ranks.key.specRev)
	d = decide(view{job: "j", spec: ptr(spec("3")), plan: run, nodes: in(nodes, membership.NodeRunning, 1)}, memo{}, tm, t0)
	assert.False(t, d.memo.ranks.valid)
}
