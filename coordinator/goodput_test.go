package coordinator_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/internal/testkit/simnode"
	"github.com/elastictraining/coordinator/internal/timeline"
	"github.com/elastictraining/coordinator/membership"
)

// accounted waits until the job's account follows generation gen, which
// trains, and returns the status.
func (h *harness) accounted(job string, gen int64) membership.Status {
	h.t.Helper()
	return h.waitStatus(job, "an account of generation training", func(s membership.Status) bool {
		return s.Phase == membership.JobRunning && s.Generation == gen && s.Goodput != nil &&
			s.Goodput.Generation == gen && s.Goodput.Now == membership.CauseTraining
	})
}

// addsUp checks that an account's seconds are its wall time, every
// second of it once.
func addsUp(t *testing.T, g *membership.Goodput) {
	t.Helper()
	require.NoError(t, g.Validate())
	assert.InDelta(t, g.AsOf.Sub(g.Since).Seconds(), g.Total.Wall(), 1e-6, "the causes add up to the wall time: %+v", g.Total)
	var minutes membership.Seconds
	for _, m := range g.Minutes {
		for _, c := range membership.Causes {
			minutes.Add(c, m.Seconds.Of(c))
		}
	}
	assert.InDelta(t, g.Total.Wall(), minutes.Wall(), 1e-6, "a job younger than an hour has every second in its minutes")
}

// A job's account counts the time from its last progress before a failure
// to the next generation's start as restarting, adds up to its wall time,
// and is kept by the next leader, which goes on counting from it.
func TestGoodputAccountsARestartAndSurvivesFailover(t *testing.T) {
	h := newHarness(t)
	reg1, reg2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	c1 := h.startCoordinator("c1", func(c *coordinator.Config) { c.Registerer = reg1 })
	waitLeader(t, c1)
	c2 := h.startCoordinator("c2", func(c *coordinator.Config) { c.Registerer = reg2 })
	h.scale("job", "2")
	nodes := h.nodes("job", "n0", "n1")
	st := h.accounted("job", 1)
	addsUp(t, st.Goodput)
	since, started := st.Goodput.Since, st.Goodput.Total.Restarting

	// The ranks' last step, then a rank fails: from that step on the job
	// restarts, until generation 2 runs.
	lastStep := time.Now()
	for _, n := range nodes {
		n.Workload.SetMarks(membership.StepMarks{Generation: 1, Last: lastStep, Furthest: 100})
	}
	require.True(t, nodes[1].Workload.Exit(1))
	st = h.accounted("job", 2)
	g := st.Goodput
	addsUp(t, g)
	assert.Equal(t, since, g.Since, "one account over the job's life")
	assert.Equal(t, int64(100), g.Furthest, "the furthest step learned from the acks")
	running := g.TrainingFrom
	assert.InDelta(t, running.Sub(lastStep).Seconds(), g.Total.Restarting-started, 1e-6,
		"restarting from the last step to generation 2 running: %+v", g.Total)
	assert.GreaterOrEqual(t, g.Total.Restarting-started, time.Duration(st.Steps.Total).Seconds(), "the restart's steps are within it")
	assert.Zero(t, g.Total.Hung)
	assert.Zero(t, g.Total.Redone)
	before := g.Total

	// The leader's metrics say the account, read at the scrape.
	job := map[string]string{"job": "job"}
	require.Eventually(t, func() bool {
		v, ok := series(t, reg1, "elastic_job_lost_seconds_total", map[string]string{"job": "job", "cause": "restarting"})
		return ok && v >= before.Restarting
	}, 10*time.Second, 5*time.Millisecond)
	ratio, ok := series(t, reg1, "elastic_job_goodput_ratio", job)
	require.True(t, ok)
	assert.Greater(t, ratio, 0.0)
	assert.Less(t, ratio, 1.0)
	for _, cause := range []string{"waiting", "hung", "redone", "suspended"} {
		_, ok := series(t, reg1, "elastic_job_lost_seconds_total", map[string]string{"job": "job", "cause": cause})
		assert.True(t, ok, cause)
	}
	_, ok = series(t, reg2, "elastic_job_goodput_ratio", job)
	assert.False(t, ok, "a standby says nothing of the job")

	// The leader goes; the next one continues the account it finds, and
	// counts the next restart (no step marks: from the stop's commit).
	c1.Stop()
	waitLeader(t, c2)
	require.True(t, nodes[0].Workload.Exit(1))
	st = h.accounted("job", 3)
	g = st.Goodput
	addsUp(t, g)
	assert.Equal(t, since, g.Since)
	assert.Greater(t, g.Total.Restarting, before.Restarting, "the second restart counted")
	assert.GreaterOrEqual(t, g.Total.Training, before.Training, "nothing goes backwards")
	assert.GreaterOrEqual(t, g.Total.Waiting, before.Waiting)
	_, ok = series(t, reg1, "elastic_job_goodput_ratio", job)
	assert.False(t, ok, "a replica that stopped leading says nothing of the job")
	v, ok := series(t, reg2, "elastic_job_lost_seconds_total", map[string]string{"job": "job", "cause": "restarting"})
	assert.True(t, ok)
	assert.GreaterOrEqual(t, v, g.Total.Restarting, "the new leader's from the account it kept")

	// The job ends: its account stops there.
	for _, n := range nodes {
		require.True(t, n.Workload.Exit(0))
	}
	st = h.waitStatus("job", "Succeeded", func(s membership.Status) bool { return s.Phase == membership.JobSucceeded })
	require.NotNil(t, st.Goodput)
	addsUp(t, st.Goodput)
	assert.Empty(t, st.Goodput.Now, "the account of a job that ended ends")
	assert.Equal(t, st.Goodput.Total, st.Goodput.At(time.Now().Add(time.Hour)).Total, "and counts no more")
}

// Commonly only rank 0 names its steps (it alone saves). When another
// rank takes its first step last, the steps a generation trains again
// are still counted, from rank 0's first named step: they were counted
// from the last rank to step alone, which named none, and so none.
func TestGoodputCountsRedoneStepsThatOnlyRankZeroNames(t *testing.T) {
	h := newHarness(t)
	waitLeader(t, h.startCoordinator("c1", nil))
	h.scale("job", "2")
	nodes := h.nodes("job", "n0", "n1")
	h.accounted("job", 1)

	// Generation 1 trains steps 1 to 100, 10 ms each; then a rank fails.
	start := time.Now().Add(-time.Second)
	last := start.Add(990 * time.Millisecond)
	nodes[0].Workload.SetMarks(membership.StepMarks{Generation: 1, First: start, Resumed: 1, ResumedAt: start, Last: last, Furthest: 100})
	nodes[1].Workload.SetMarks(membership.StepMarks{Generation: 1, First: start, Last: last, Furthest: 100})
	require.True(t, nodes[1].Workload.Exit(1))
	h.accounted("job", 2)

	// Generation 2 resumes from the checkpoint of step 50: rank 0 steps
	// first (step 51), rank 1 a moment later. It is back at step 100, the
	// furthest, 49 steps later: 0.49 s trained again.
	// A sidecar writes the marks of a running generation's first steps
	// into its node record once its ranks stepped (simulated nodes have
	// no ranks): written here as it would.
	now := time.Now()
	h.markNode("job", "n0", membership.StepMarks{Generation: 2, First: now, Resumed: 51, ResumedAt: now, Last: now, Furthest: 51})
	h.markNode("job", "n1", membership.StepMarks{Generation: 2, First: now.Add(5 * time.Millisecond), Last: now.Add(5 * time.Millisecond), Furthest: 1})
	st := h.waitStatus("job", "the redone steps counted", func(s membership.Status) bool {
		return s.Goodput != nil && s.Goodput.FirstClassed && s.Goodput.Generation == 2
	})
	g := st.Goodput
	addsUp(t, g)
	assert.InDelta(t, 0.49, g.Total.Redone+g.Owed, 0.005, "49 steps of 10 ms trained again (redone %.3fs, owed %.3fs)", g.Total.Redone, g.Owed)
}

// markNode writes m into the node record of node, under its lease, as the
// node's sidecar does once its ranks first stepped.
func (h *harness) markNode(job, node string, m membership.StepMarks) {
	h.t.Helper()
	key := h.keys.Node(job, node)
	resp, err := h.cli.Get(h.t.Context(), key)
	require.NoError(h.t, err)
	require.Len(h.t, resp.Kvs, 1, "node %s", node)
	var n map[string]any
	require.NoError(h.t, json.Unmarshal(resp.Kvs[0].Value, &n))
	n["marks"] = m
	val, err := json.Marshal(n)
	require.NoError(h.t, err)
	_, err = h.cli.Put(h.t.Context(), key, string(val), clientv3.WithIgnoreLease())
	require.NoError(h.t, err)
}

// A job's start-up is its own cause: the wait for a node whose sidecar
// had started (warming its interpreters) and the first generation up to
// its ranks' first steps count as starting, the wait before as waiting;
// a later restart is restarting. The events carry every change of the
// account, so that the timeline drawn from them has each cause's seconds.
func TestGoodputCountsTheStartUpAndTheEventsCarryTheAccount(t *testing.T) {
	h := newHarness(t)
	waitLeader(t, h.startCoordinator("c1", nil))
	h.scale("job", "2")
	n0 := h.node("job", "n0")
	h.waitStatus("job", "waiting for a node", func(s membership.Status) bool { return s.Phase == membership.JobWaiting })
	// n1's sidecar starts and warms its interpreters for 300 ms before
	// it registers: the job waits for nothing that exists until then.
	time.Sleep(200 * time.Millisecond) // the job waits; nothing to sync
	n1Started := time.Now()
	time.Sleep(300 * time.Millisecond) // n1 warms
	n1 := simnode.Start(t, simnode.Config{Client: h.cli, Keys: h.keys, Job: "job", ID: "n1", TTL: h.nodeTTL, Started: n1Started})
	h.accounted("job", 1)
	first := time.Now()
	for _, n := range []string{"n0", "n1"} {
		h.markNode("job", n, membership.StepMarks{Generation: 1, First: first, Last: first, Furthest: 1})
	}
	st := h.waitStatus("job", "the first steps classed", func(s membership.Status) bool {
		return s.Goodput != nil && s.Goodput.FirstClassed && s.Goodput.Generation == 1
	})
	g := st.Goodput
	addsUp(t, g)
	assert.False(t, g.StartingUp, "the job has trained")
	assert.InDelta(t, n1Started.Sub(g.Since).Seconds(), g.Total.Waiting, 0.05, "waiting until n1's sidecar started: %+v", g.Total)
	assert.InDelta(t, first.Sub(n1Started).Seconds(), g.Total.Starting, 0.05, "starting from n1's sidecar's start to the first steps: %+v", g.Total)
	assert.Zero(t, g.Total.Restarting, "no restart yet")
	started := g.Total.Starting

	// A restart is not a start-up.
	last := time.Now()
	for _, n := range []*simnode.Node{n0, n1} {
		n.Workload.SetMarks(membership.StepMarks{Generation: 1, First: first, Last: last, Furthest: 100})
	}
	require.True(t, n1.Workload.Exit(1))
	h.accounted("job", 2)
	st = h.waitStatus("job", "the stop classed", func(s membership.Status) bool {
		return s.Goodput != nil && s.Goodput.Generation == 2 && s.Goodput.Total.Restarting > 0
	})
	g = st.Goodput
	addsUp(t, g)
	assert.Equal(t, started, g.Total.Starting, "a restart is counted as restarting")

	// The timeline drawn from the events has the account's seconds, cause
	// by cause, up to the account's last moment.
	events, err := h.client.Events(t.Context(), "job")
	require.NoError(t, err)
	drawn := membership.Seconds{}
	for _, s := range timeline.Activity(events, g, g.AsOf) {
		drawn.Add(s.Cause, s.To.Sub(s.From).Seconds())
	}
	for _, c := range membership.Causes {
		assert.InDelta(t, g.Total.Of(c), drawn.Of(c), 0.002, "%s: the account %+v, drawn %+v", c, g.Total, drawn)
	}
}
