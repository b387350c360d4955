package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/memckpt"
)

// saveTrainerYAML is an ElasticJob of testdata/savetrainer.py, whose ranks
// keep their step with elastic.save alone.
func saveTrainerYAML(name string, workers int, extra string) string {
	return elasticJobRunning(name, workers, extra, "/usr/bin/python3, "+filepath.Join(repoRoot, "testdata", "savetrainer.py"))
}

// savedSteps are the steps each rank of a save-trainer job last saved, by
// rank, read from its SAVE_DIR.
func savedSteps(t *testing.T, dir string, ranks int) []int {
	out := make([]int, ranks)
	for r := range out {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.last", r)))
		if err == nil {
			out[r], _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	return out
}

// resumedSteps are the steps each rank of generation gen resumed from,
// by rank, from starts.log; -1 for a rank not started.
func resumedSteps(t *testing.T, dir string, gen int64, ranks int) []int {
	out := make([]int, ranks)
	for r := range out {
		out[r] = -1
	}
	b, _ := os.ReadFile(filepath.Join(dir, "starts.log"))
	for _, m := range regexp.MustCompile(`gen=(\d+) rank=(\d+) step=(\d+)`).FindAllStringSubmatch(string(b), -1) {
		g, _ := strconv.ParseInt(m[1], 10, 64)
		r, _ := strconv.Atoi(m[2])
		s, _ := strconv.Atoi(m[3])
		if g == gen && r < ranks {
			out[r] = s
		}
	}
	return out
}

// TestASuspendedElasticJobStopsSavesItsStateAndResumesFromIt suspends a
// running ElasticJob of two ranks that keep their step with elastic.save
// alone (no file of their own): the generation stops, the pods go, each
// sidecar writes its rank's newest copy to the job's path as it leaves,
// the phase and condition say Suspended and nothing runs. Resumed, every
// rank starts from the step it last saved: none lost.
func TestASuspendedElasticJobStopsSavesItsStateAndResumesFromIt(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true})
	applyCRDs(t, e.c, e.dyn)
	e.kubectl(saveTrainerYAML("pausable", 2, ""), "apply", "-f", "-")
	before := e.jobStatus("pausable", "Running at 2", runningAt(2))
	dir := filepath.Join(e.toyDir, "pausable")
	require.Eventually(t, func() bool { return savedSteps(t, dir, 2)[1] >= 20 }, 60*time.Second, 20*time.Millisecond, "the ranks never trained 20 steps")

	e.kubectl("", "patch", "elasticjob/pausable", "--type=merge", "-p", `{"spec":{"suspend":true}}`)
	st := e.jobStatus("pausable", "Suspended", func(s jobv1.ElasticJobStatus) bool { return s.Phase == jobv1.PhaseSuspended })
	c := meta.FindStatusCondition(st.Conditions, jobv1.ConditionSuspended)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, before.Generation, st.Generation-1, "the stop is the next generation's")
	assert.Zero(t, st.Restarts, "a suspension is no fault")
	require.Eventually(t, func() bool {
		pods, err := e.c.Client.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: jobv1.LabelJob + "=pausable"})
		return err == nil && len(pods.Items) == 0
	}, 60*time.Second, 50*time.Millisecond, "the suspended job's pods never went")
	saved := savedSteps(t, dir, 2)
	// Each sidecar wrote its rank's newest copy as it left: the file's
	// copy is the last save (the generation's saves are numbered from 1,
	// as its steps are).
	for r, step := range saved {
		var c memckpt.Copy
		var err error
		require.Eventually(t, func() bool {
			c, err = memckpt.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.ckpt", r)))
			return err == nil && c.Seq >= int64(step)
		}, 30*time.Second, 50*time.Millisecond, "rank %d's file never held its last save, step %d: %+v, %v", r, step, c.Meta, err)
	}
	time.Sleep(time.Second)
	assert.Equal(t, saved, savedSteps(t, dir, 2), "nothing trains while the job is suspended")

	e.kubectl("", "patch", "elasticjob/pausable", "--type=merge", "-p", `{"spec":{"suspend":false}}`)
	after := e.jobStatus("pausable", "Running at 2 again", func(s jobv1.ElasticJobStatus) bool {
		return runningAt(2)(s) && s.Generation > st.Generation-1
	})
	var resumed []int
	require.Eventually(t, func() bool {
		resumed = resumedSteps(t, dir, after.Generation, 2)
		return !slices.Contains(resumed, -1)
	}, 30*time.Second, 20*time.Millisecond, "the trainers of generation %d never started", after.Generation)
	assertNoStepLost(t, saved, resumed)
	c = meta.FindStatusCondition(after.Conditions, jobv1.ConditionSuspended)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.True(t, hasEvent(e.events("pausable"), jobv1.PhaseSuspended, "Suspended"), "the phase change is an Event")
}

// assertNoStepLost checks that every rank resumed from the step it last
// saved, or the one after: a rank stopped between its save and its note
// of it saved one step more than it noted.
func assertNoStepLost(t *testing.T, saved, resumed []int) {
	t.Helper()
	require.Len(t, resumed, len(saved))
	for r := range saved {
		assert.True(t, resumed[r] == saved[r] || resumed[r] == saved[r]+1,
			"rank %d saved step %d and resumed from step %d: every rank resumes from its last save, 0 steps lost", r, saved[r], resumed[r])
	}
}

// TestSuspendingAgainAndAgainLosesNoStep suspends and resumes a job of
// two ranks that keep their step with elastic.save alone, four times:
// each time every rank resumes from the step it last saved. The save a
// rank was sending when its SIGTERM came is stored first (a trainer's
// handler flushes it, and the sidecar takes saves until the graceful stop
// returns): without that, a rank resumed one step behind about every
// other time.
func TestSuspendingAgainAndAgainLosesNoStep(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true})
	applyCRDs(t, e.c, e.dyn)
	e.kubectl(saveTrainerYAML("flip", 2, ""), "apply", "-f", "-")
	st := e.jobStatus("flip", "Running at 2", runningAt(2))
	dir := filepath.Join(e.toyDir, "flip")
	for cycle := range 4 {
		base := savedSteps(t, dir, 2)
		require.Eventually(t, func() bool { return savedSteps(t, dir, 2)[1] >= base[1]+10 }, 60*time.Second, 20*time.Millisecond, "cycle %d: no training", cycle)
		e.kubectl("", "patch", "elasticjob/flip", "--type=merge", "-p", `{"spec":{"suspend":true}}`)
		sus := e.jobStatus("flip", "Suspended", func(s jobv1.ElasticJobStatus) bool { return s.Phase == jobv1.PhaseSuspended })
		saved := savedSteps(t, dir, 2)
		e.kubectl("", "patch", "elasticjob/flip", "--type=merge", "-p", `{"spec":{"suspend":false}}`)
		st = e.jobStatus("flip", "Running at 2 again", func(s jobv1.ElasticJobStatus) bool {
			return runningAt(2)(s) && s.Generation > sus.Generation-1
		})
		var resumed []int
		require.Eventually(t, func() bool {
			resumed = resumedSteps(t, dir, st.Generation, 2)
			return !slices.Contains(resumed, -1)
		}, 30*time.Second, 20*time.Millisecond, "cycle %d: generation %d never started", cycle, st.Generation)
		t.Logf("cycle %d: saved %v, generation %d resumed %v", cycle, saved, st.Generation, resumed)
		assertNoStepLost(t, saved, resumed)
	}
}
