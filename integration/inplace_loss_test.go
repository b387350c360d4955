package integration

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

// inPlaceStep is one line of examples/pytorch/train_in_place.py's loss log.
type inPlaceStep struct {
	generation, world, step int
	loss, digest            string
}

func readInPlaceLog(t *testing.T, path string) []inPlaceStep {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []inPlaceStep
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		c := strings.Split(sc.Text(), ",")
		if len(c) != 5 {
			continue // a line being written
		}
		var s inPlaceStep
		s.generation, _ = strconv.Atoi(c[0])
		s.world, _ = strconv.Atoi(c[1])
		s.step, _ = strconv.Atoi(c[2])
		s.loss, s.digest = c[3], c[4]
		out = append(out, s)
	}
	return out
}

// The example that trains in place, killed ten times (a rank's process,
// rank 0's and rank 1's in turn, each replaced by a started spare), trains
// the same model as an uninterrupted run of it: at every step, the same
// loss and the same parameters and optimizer state, bit for bit.
func TestTenFaultsLeaveTheLossCurveOfAnUninterruptedRun(t *testing.T) {
	t.Parallel()
	requireTorch(t)
	const steps = 3000
	example := filepath.Join(repoRoot, "examples", "pytorch", "train_in_place.py")
	dir := t.TempDir()

	refLog := filepath.Join(dir, "uninterrupted.csv")
	ref := startRun(t, []string{"--np", "2", "--in-place", "--job", "curve-ref"},
		[]string{python, example, "--steps", strconv.Itoa(steps), "--loss-log", refLog})
	require.Equal(t, 0, ref.wait(), "the uninterrupted run succeeded:\n%s", ref.out)
	want := map[int]inPlaceStep{}
	for _, s := range readInPlaceLog(t, refLog) {
		want[s.step] = s
	}
	require.Len(t, want, steps)

	faultLog := filepath.Join(dir, "faults.csv")
	r := startRun(t, []string{"--np", "2", "--spares", "1", "--in-place", "--max-restarts", "20", "--job", "curve"},
		[]string{python, example, "--steps", strconv.Itoa(steps), "--step-time", "0.03", "--loss-log", faultLog})
	for fault := range 10 {
		// A started spare is waiting, and the generation has trained.
		var victim int
		require.Eventually(t, func() bool {
			gen, spare, pids := r.inPlaceNodes("curve")
			rows := readInPlaceLog(t, faultLog)
			trained := len(rows) > 0 && rows[len(rows)-1].generation == int(gen) && len(rows) >= 20*(fault+1)
			if len(pids) == 2 {
				victim = pids[fault%2]
			}
			return spare && trained && victim != 0
		}, 90*time.Second, 20*time.Millisecond, "fault %d: no started spare, or no training:\n%s", fault+1, r.out)
		require.NoError(t, syscall.Kill(victim, syscall.SIGKILL), "fault %d", fault+1)
		require.Eventually(t, func() bool { return !pidAlive(victim) }, 10*time.Second, 10*time.Millisecond)
	}
	// Its 3 000 steps of 30 ms outlast run's usual 90 s after the faults.
	select {
	case <-r.done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("run did not exit:\n%s", r.out)
	}
	require.Equal(t, 0, r.code, "the job succeeded after ten faults:\n%s", r.out)

	got := readInPlaceLog(t, faultLog)
	generations := map[int]bool{}
	seen := map[int]bool{}
	for _, s := range got {
		generations[s.generation] = true
		seen[s.step] = true
		w := want[s.step]
		assert.Equal(t, 2, s.world, "step %d of generation %d", s.step, s.generation)
		assert.Equal(t, w.loss, s.loss, "step %d of generation %d: the loss of the uninterrupted run", s.step, s.generation)
		assert.Equal(t, w.digest, s.digest, "step %d of generation %d: the state of the uninterrupted run", s.step, s.generation)
	}
	// Rank 0 logs a step after training it: a rank 0 killed between the
	// two took its line along, not the step, which its peer trained with
	// it. So a step may be missing only where a generation ended.
	for step := 1; step <= steps; step++ {
		if !seen[step] {
			assert.True(t, seen[step+1] && seen[step-1] && generationOf(got, step+1) != generationOf(got, step-1),
				"step %d was trained: its neighbours are, in two generations", step)
		}
	}
	assert.GreaterOrEqual(t, len(seen), steps-10, "at most a line per fault is missing")
	assert.GreaterOrEqual(t, len(generations), 11, "ten faults, each a new generation")
	t.Logf("%d steps, %d generations, %d lines (steps trained again: %d)", steps, len(generations), len(got), len(got)-len(seen))
}

// inPlaceNodes is the job's running generation, whether a started spare
// waits (a node holding no rank whose trainer's start-up is done), and the
// running nodes' first training processes, in node order.
func (r *localRun) inPlaceNodes(job string) (gen int64, spare bool, pids []int) {
	st, err := r.client.Status(r.t.Context(), job)
	if err != nil || st.Phase != membership.JobRunning {
		return 0, false, nil
	}
	p, err := r.client.Plan(r.t.Context(), job)
	if err != nil || p.Generation != st.Generation || p.Phase != membership.PhaseRun {
		return 0, false, nil
	}
	members := map[string]bool{}
	for _, m := range p.Members {
		members[m.Node] = true
	}
	nodes, err := r.client.Nodes(r.t.Context(), job)
	if err != nil {
		return 0, false, nil
	}
	for _, n := range nodes {
		switch {
		case members[n.ID] && n.State == membership.NodeRunning && n.Generation == st.Generation && len(n.PIDs) > 0:
			pids = append(pids, n.PIDs[0])
		case !members[n.ID] && n.InPlace && !n.Starting && !n.Cold && n.State != membership.NodeLeaving:
			spare = true
		}
	}
	return st.Generation, spare, pids
}

// generationOf is the generation the log's last line of step says it was
// trained in, 0 if none.
func generationOf(log []inPlaceStep, step int) int {
	gen := 0
	for _, s := range log {
		if s.step == step {
			gen = s.generation
		}
	}
	return gen
}

func pidAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}
