package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

// hung is nodes running generation gen, with node i's rank reported hung
// with the given last sign of life (zero: no report).
func hung(nodes []membership.LiveNode, gen int64, last map[string]time.Time, stopped string) []membership.LiveNode {
	out := in(nodes, membership.NodeRunning, gen)
	for i := range out {
		at, ok := last[out[i].ID]
		if !ok {
			continue
		}
		out[i].Hang = &membership.Hang{Generation: gen, Rank: i, Step: 41 + int64(i), Quiet: membership.Duration(5 * time.Second),
			Timeout: membership.Duration(5 * time.Second), LastActivity: at, Stopped: out[i].ID == stopped}
	}
	return out
}

func TestDecideHang(t *testing.T) {
	nodes := live("a", "b", "c")
	run := runPlan(3, nodes)
	run.Watch = &membership.HangWatch{}

	t.Run("waits for the peers' reports, then names the rank whose last sign of life is oldest", func(t *testing.T) {
		v := view{job: "j", spec: ptr(spec("3")), plan: run, nodes: hung(nodes, 3, map[string]time.Time{"a": t0.Add(30 * time.Millisecond)}, "")}
		d := decide(v, memo{}, tm, t0)
		assert.Nil(t, d.plan, "one report of three: the others have hangSettle to come")
		assert.Equal(t, t0.Add(hangSettle), d.wakeAt)

		v.nodes = hung(nodes, 3, map[string]time.Time{"a": t0.Add(30 * time.Millisecond), "b": t0.Add(10 * time.Millisecond)}, "")
		v.idx, v.prog = nil, nil
		d = decide(v, d.memo, tm, t0.Add(hangSettle))
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseStop, d.plan.Phase)
		require.NotNil(t, d.plan.Hang)
		assert.Equal(t, "b", d.plan.Hang.Node, "b's rank went quiet first: a's waits for it")
		assert.Equal(t, "rank 1 on node b made no progress for 5s (hang timeout 5s) after step 42; stacks in its log", d.plan.Reason)
		assert.Equal(t, 1, d.plan.Interruptions)
		assert.Equal(t, []string{"GenerationStopping", "RankHung"}, types(d.events))
	})
	t.Run("every running member reported: no wait", func(t *testing.T) {
		all := map[string]time.Time{"a": t0.Add(3 * time.Millisecond), "b": t0.Add(2 * time.Millisecond), "c": t0.Add(time.Millisecond)}
		d := decide(view{job: "j", spec: ptr(spec("3")), plan: run, nodes: hung(nodes, 3, all, "")}, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, "c", d.plan.Hang.Node)
	})
	t.Run("a stopped rank is the cause at once", func(t *testing.T) {
		last := map[string]time.Time{"a": t0, "c": t0.Add(time.Second)}
		d := decide(view{job: "j", spec: ptr(spec("3")), plan: run, nodes: hung(nodes, 3, last, "c")}, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, "c", d.plan.Hang.Node)
		assert.Contains(t, d.plan.Reason, "rank 2 on node c was stopped (SIGSTOP, not a debugger)")
	})
	t.Run("a report of an earlier generation is not this one's", func(t *testing.T) {
		stale := hung(nodes, 3, map[string]time.Time{"a": t0}, "")
		stale[0].Hang.Generation = 2
		d := decide(view{job: "j", spec: ptr(spec("3")), plan: run, nodes: stale}, memo{}, tm, t0)
		assert.Nil(t, d.plan)
	})
}

func TestHangRestartCharges(t *testing.T) {
	nodes := live("a", "b", "c")
	run := runPlan(3, nodes)
	five := membership.Duration(5 * time.Second)
	stopFor := func(node string, hangRestarts int, hangs map[string]int) *membership.Plan {
		return &membership.Plan{Generation: 4, Phase: membership.PhaseStop, Members: run.Members, Reason: "hang", StopAt: t0,
			Hang: &membership.Hang{Node: node, Generation: 3, Rank: 1, Step: 9, Quiet: five, Timeout: five}, HangRestarts: hangRestarts,
			Hangs: hangs, Watch: &membership.HangWatch{Expect: true}}
	}
	s := spec("2:3")

	t.Run("spends the hang budget, not the restart budget, and grows the least timeout", func(t *testing.T) {
		d := decide(view{job: "j", spec: &s, plan: stopFor("b", 0, nil), nodes: in(nodes, membership.NodeStopped, 4)}, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.PhaseRun, d.plan.Phase)
		assert.Equal(t, 0, d.plan.Restarts)
		assert.Equal(t, 1, d.plan.HangRestarts)
		assert.Equal(t, map[string]int{"b": 1}, d.plan.Hangs)
		require.NotNil(t, d.plan.Watch)
		assert.Equal(t, five*hangGrowth, d.plan.Watch.AtLeast, "the pause that cost a restart passes next time")
		assert.True(t, d.plan.Watch.Expect)
		assert.Empty(t, d.plan.Excluded, "one hang excludes no node at fault tolerance 1")
		assert.Len(t, d.plan.Members, 3)
	})
	t.Run("a node that hangs again is excluded while another can take its place", func(t *testing.T) {
		three := spec("3")
		spare := append(in(nodes, membership.NodeStopped, 4), in(live("d"), membership.NodeWaiting, 0)...)
		d := decide(view{job: "j", spec: &three, plan: stopFor("b", 1, map[string]int{"b": 1}), nodes: spare}, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, []string{"b"}, d.plan.Excluded)
		assert.Equal(t, map[string]int{"b": 2}, d.plan.Hangs)
		_, ok := d.plan.Member("b")
		assert.False(t, ok, "a, c and d run; b waits")
	})
	t.Run("a spent hang budget fails the job", func(t *testing.T) {
		d := decide(view{job: "j", spec: &s, plan: stopFor("b", s.MaxHangRestarts, nil), nodes: in(nodes, membership.NodeStopped, 4)}, memo{}, tm, t0)
		require.NotNil(t, d.plan)
		assert.Equal(t, membership.JobFailed, d.plan.Result)
		assert.Contains(t, d.plan.Reason, "the hang budget of 10 is spent")
	})
}

func TestAHangReportWaitsForAPeersDeclaredQuietPhase(t *testing.T) {
	nodes := live("a", "b")
	run := runPlan(3, nodes)
	// b's rank waits in its allreduce for a's, which declared a long
	// evaluation (elastic.quiet) until t0+10s.
	n := hung(nodes, 3, map[string]time.Time{"b": t0.Add(-5 * time.Second)}, "")
	n[0].QuietUntil = t0.Add(10 * time.Second)
	v := view{job: "j", spec: ptr(spec("2")), plan: run, nodes: n}
	d := decide(v, memo{}, tm, t0.Add(time.Second))
	assert.Nil(t, d.plan, "the peer's report has hangSettle to come")
	d = decide(v, d.memo, tm, t0.Add(time.Second+hangSettle))
	assert.Nil(t, d.plan, "the peer's quiet phase is not over")
	assert.Equal(t, t0.Add(10*time.Second+hangAfterQuiet), d.wakeAt)

	d = decide(v, d.memo, tm, t0.Add(10*time.Second+hangAfterQuiet))
	require.NotNil(t, d.plan, "still reported after the phase and its margin: hung")
	assert.Equal(t, "b", d.plan.Hang.Node)

	n[1].Hang.Stopped = true
	v.idx, v.prog = nil, nil
	d = decide(v, memo{}, tm, t0.Add(time.Second))
	require.NotNil(t, d.plan, "a stopped rank is hung whatever its peers declared")
}
