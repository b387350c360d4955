package coordinator_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// series returns the value of the series of name whose labels include
// want, and whether there is one.
func series(t testing.TB, reg *prometheus.Registry, name string, want map[string]string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// TestAJobsMetricsExistFromTheStart: a job's series are there, at zero,
// as soon as the leader sees it; its gauges follow its status; a replica
// that stops leading drops its gauges.
func TestAJobsMetricsExistFromTheStart(t *testing.T) {
	h := newHarness(t)
	reg := prometheus.NewRegistry()
	c := h.startCoordinator("c1", func(c *coordinator.Config) { c.Registerer = reg })
	h.scale("m", "2:3")
	job := map[string]string{"job": "m"}
	require.Eventually(t, func() bool {
		v, ok := series(t, reg, "elastic_job_phase", map[string]string{"job": "m", "phase": "Waiting"})
		return ok && v == 1
	}, 10*time.Second, 5*time.Millisecond, "a job waiting for nodes is Waiting")
	for _, name := range []string{"elastic_job_restarts_total", "elastic_job_generations_total", "elastic_job_evictions_total", "elastic_node_lease_losses_total"} {
		v, ok := series(t, reg, name, job)
		assert.True(t, ok, "%s{job=\"m\"} before anything happened", name)
		assert.Zero(t, v, name)
	}
	for _, step := range []string{"detect", "stop", "wait", "start", "total"} {
		_, ok := series(t, reg, "elastic_job_step_seconds", map[string]string{"job": "m", "step": step})
		assert.True(t, ok, "step %s", step)
	}
	v, _ := series(t, reg, "elastic_job_np_max", job)
	assert.Equal(t, 3.0, v)

	nodes := h.nodes("m", "n0", "n1", "n2")
	h.waitRunning("m", 3, 0)
	require.Eventually(t, func() bool {
		v, _ := series(t, reg, "elastic_job_phase", map[string]string{"job": "m", "phase": "Running"})
		w, _ := series(t, reg, "elastic_job_world_size", job)
		return v == 1 && w == 3
	}, 10*time.Second, 5*time.Millisecond)
	waiting, _ := series(t, reg, "elastic_job_phase", map[string]string{"job": "m", "phase": "Waiting"})
	assert.Zero(t, waiting, "one phase at a time")

	require.True(t, nodes[1].Workload.Exit(1))
	h.waitRunning("m", 3, 1)
	require.Eventually(t, func() bool {
		r, _ := series(t, reg, "elastic_job_restarts_total", job)
		spent, _ := series(t, reg, "elastic_job_restart_budget_spent", job)
		total, _ := series(t, reg, "elastic_job_step_seconds", map[string]string{"job": "m", "step": "total"})
		return r == 1 && spent == 1 && total == 2
	}, 10*time.Second, 5*time.Millisecond, "a restart shows in the counter, the budget and the histogram")
	budget, _ := series(t, reg, "elastic_job_restart_budget", job)
	assert.Equal(t, float64(membership.DefaultMaxRestarts), budget)

	c.Stop()
	_, ok := series(t, reg, "elastic_job_phase", job)
	assert.False(t, ok, "a replica that no longer leads says nothing of the job's state")
	_, ok = series(t, reg, "elastic_job_restarts_total", job)
	assert.True(t, ok, "its counters stay")
}

// TestAFinishedJobIsDeletedAfterItsRetention: its keys go, and so do its
// series; a job that has not ended is kept.
func TestAFinishedJobIsDeletedAfterItsRetention(t *testing.T) {
	h := newHarness(t)
	reg := prometheus.NewRegistry()
	h.startCoordinator("c1", func(c *coordinator.Config) { c.Registerer = reg; c.FinishedJobRetention = 2 * time.Second })
	h.scale("done", "1")
	h.scale("running", "1")
	done := h.nodes("done", "d0")
	h.nodes("running", "r0")
	h.waitRunning("done", 1, 0)
	h.waitRunning("running", 1, 0)
	require.True(t, done[0].Workload.Exit(0))
	h.waitStatus("done", "Succeeded", func(s membership.Status) bool { return s.Phase == membership.JobSucceeded })

	require.Eventually(t, func() bool {
		resp, err := h.cli.Get(t.Context(), h.keys.Job("done"), clientv3WithPrefix())
		return err == nil && len(resp.Kvs) == 0
	}, 20*time.Second, 20*time.Millisecond, "the finished job's keys are deleted")
	require.Eventually(t, func() bool {
		_, ok := series(t, reg, "elastic_job_phase", map[string]string{"job": "done"})
		return !ok
	}, 10*time.Second, 20*time.Millisecond, "and its series")
	st, err := h.client.Status(t.Context(), "running")
	require.NoError(t, err)
	assert.Equal(t, membership.JobRunning, st.Phase, "a job that runs is kept")
}

// TestACancelledJobEndsFailed: Cancel ends a running job, its nodes
// stop, and Delete then removes it; before it ended Delete refused.
func TestACancelledJobEndsFailed(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", nil)
	h.scale("c", "2")
	nodes := h.nodes("c", "n0", "n1")
	h.waitRunning("c", 2, 0)

	_, err := h.client.Delete(t.Context(), "c")
	require.ErrorIs(t, err, jobclient.ErrJobRunning)

	st, err := h.client.Cancel(t.Context(), "c", "deleted by a test")
	require.NoError(t, err)
	assert.Equal(t, membership.JobFailed, st.Phase)
	assert.Equal(t, "cancelled: deleted by a test", st.Message)
	for _, n := range nodes {
		select {
		case <-n.Done():
		case <-time.After(20 * time.Second):
			t.Fatalf("node %s did not end with the job", n.ID)
		}
		_, running := n.Workload.Running()
		assert.False(t, running)
	}
	_, err = h.client.Delete(t.Context(), "c")
	require.NoError(t, err)
	resp, err := h.cli.Get(t.Context(), h.keys.Job("c"), clientv3WithPrefix())
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs)
	_, err = h.client.Delete(t.Context(), "c")
	require.ErrorIs(t, err, jobclient.ErrJobNotFound)
}
