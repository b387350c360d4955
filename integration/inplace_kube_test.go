package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
)

// TestKubectlScaleGrowsAnElasticJobFromItsStartedSpareAndShrinksItInPlace
// runs an ElasticJob with spec.inPlace and a spare, of
// testdata/inplace_trainer.py (real torch.distributed over gloo):
// `kubectl scale` up by one makes the started spare the new rank while the
// ranks keep their processes, and back down the remaining ranks train on
// in place, no process started: the leader's events say how each rank
// began.
func TestKubectlScaleGrowsAnElasticJobFromItsStartedSpareAndShrinksItInPlace(t *testing.T) {
	t.Parallel()
	requireTorch(t)
	e := newKubeEnv(t, kubeOptions{injected: true, toyEnv: []string{"STEPS=100000", "STEP_SECONDS=0.05", "STARTUP_SECONDS=1"}})
	applyCRDs(t, e.c, e.dyn)
	manifest := elasticJobRunning("inplace", 2, "inPlace: true",
		"/usr/bin/python3, "+filepath.Join(repoRoot, "testdata", "inplace_trainer.py"))
	e.kubectl(manifest[:len(manifest)-1]+"\n    spares: 1\n", "apply", "-f", "-")
	e.jobStatus("inplace", "Running at 2 with a spare", func(s jobv1.ElasticJobStatus) bool {
		return runningAt(2)(s) && s.Spares == 1
	})
	// A rank still importing torch when the job scales is kept as it is,
	// and begins the next generation "still starting": on a loaded machine
	// that takes seconds, so the test scales once every rank steps.
	e.ranksStep("inplace", 1)
	require.Eventually(t, func() bool {
		plan, err := e.client.Plan(t.Context(), "inplace")
		if err != nil {
			return false
		}
		ranked := map[string]bool{}
		for _, m := range plan.Members {
			ranked[m.Node] = true
		}
		nodes, err := e.client.Nodes(t.Context(), "inplace")
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if !ranked[n.ID] && n.InPlace && !n.Starting && !n.Cold {
				return true
			}
		}
		return false
	}, 60*time.Second, 50*time.Millisecond, "the spare never started its trainer")

	e.kubectl("", "scale", "elasticjob/inplace", "--replicas", "3")
	up := e.jobStatus("inplace", "Running at 3", runningAt(3))
	e.ranksStep("inplace", up.Generation)
	began := e.began("inplace", up.Generation)
	assert.Contains(t, began, "in place: ranks 0, 1", "the ranks kept their processes")
	assert.Contains(t, began, "started spare: rank 2", "the new rank is the spare, its start-up done")
	assert.NotContains(t, began, "cold")

	e.kubectl("", "scale", "elasticjob/inplace", "--replicas", "2")
	down := e.jobStatus("inplace", "Running at 2 again", func(s jobv1.ElasticJobStatus) bool {
		return runningAt(2)(s) && s.Generation > up.Generation
	})
	began = e.began("inplace", down.Generation)
	assert.Contains(t, began, "in place: ranks 0, 1", "the remaining ranks trained on in place")
	assert.NotContains(t, began, "cold")
	assert.NotContains(t, began, "spare")
}

// began is the leader's GenerationRunning event of generation gen: how
// each rank began.
func (e *kubeEnv) began(job string, gen int64) string {
	e.t.Helper()
	var msg string
	require.Eventually(e.t, func() bool {
		events, err := e.client.Events(e.t.Context(), job)
		if err != nil {
			return false
		}
		for _, ev := range events {
			if ev.Type == "GenerationRunning" && ev.Generation == gen {
				msg = ev.Message
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "no GenerationRunning event of generation %d", gen)
	return strings.TrimSpace(msg)
}

// ranksStep waits until every rank of generation gen, or of a later one,
// has stepped: the sidecars report their ranks' progress only once they
// train.
func (e *kubeEnv) ranksStep(job string, gen int64) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		plan, err := e.client.Plan(e.t.Context(), job)
		if err != nil || plan.Generation < gen {
			return false
		}
		nodes, err := e.client.Nodes(e.t.Context(), job)
		if err != nil {
			return false
		}
		stepping := map[string]bool{}
		for _, n := range nodes {
			stepping[n.ID] = n.Generation == plan.Generation && n.Progress != nil
		}
		for _, m := range plan.Members {
			if !stepping[m.Node] {
				return false
			}
		}
		return true
	}, 90*time.Second, 50*time.Millisecond, "the ranks of generation %d never stepped", gen)
}
