package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/membership"
)

// heldMark is warmMark whose warm imports wait while the file hold is in
// WARM_DIR: an `import torch` that lasts until the test ends it.
const heldMark = `import os, sys, time
WARM = sys.argv[0] == "-c"
while WARM and os.path.exists(os.path.join(os.environ["WARM_DIR"], "hold")):
    time.sleep(0.01)
with open(os.path.join(os.environ["WARM_DIR"], "imports"), "a") as f:
    f.write("%d %s\n" % (os.getpid(), "warm" if WARM else "cold"))
`

// spareScript records, in a file per generation and rank, its pid and
// whether it started warm; it waits to be killed in generations 1 and 2.
const spareScript = `import os, sys, time
import mark
gen, rank = os.environ["ELASTIC_GENERATION"], os.environ["RANK"]
with open(os.path.join(os.environ["WARM_DIR"], "gen-%s-rank-%s" % (gen, rank)), "w") as f:
    f.write("%d %s" % (os.getpid(), "warm" if mark.WARM else "cold"))
if gen in ("1", "2"):
    time.sleep(600)
`

// A guard killed alone takes its node's warm interpreters with it, and its
// new guard's import lasts: the next generation gives that node's rank to
// the warm spare and starts warm, and the node, warm again, is the spare
// that takes the rank of the next node whose guard dies.
func TestAKilledGuardsRankGoesToTheWarmSpare(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	const job = "coldswap"
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mark.py"), []byte(heldMark), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "s.py"), []byte(spareScript), 0o644))
	r := startRunIn(t, dir, []string{"--np", "2", "--spares", "1", "--job", job, "--preload", "mark"}, []string{"python3", "s.py"}, "WARM_DIR="+dir)
	hold := filepath.Join(dir, "hold")
	warmImports := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			data, _ := os.ReadFile(filepath.Join(dir, "imports"))
			return strings.Count(string(data), " warm\n") >= n
		}, time.Minute, 20*time.Millisecond, "never %d warm imports:\n%s", n, r.out)
	}
	// started waits for generation gen's ranks, asserting that each
	// started warm, and returns their pids.
	started := func(gen int) []int {
		t.Helper()
		pids := make([]int, 2)
		for rank := range 2 {
			name := filepath.Join(dir, fmt.Sprintf("gen-%d-rank-%d", gen, rank))
			var how string
			require.Eventually(t, func() bool {
				data, err := os.ReadFile(name)
				_, err2 := fmt.Sscanf(string(data), "%d %s", &pids[rank], &how)
				return err == nil && err2 == nil
			}, time.Minute, 10*time.Millisecond, "generation %d rank %d did not start:\n%s", gen, rank, r.out)
			assert.Equal(t, "warm", how, "generation %d rank %d started in a warm interpreter", gen, rank)
		}
		return pids
	}
	killGuard := func(trainer int) {
		t.Helper()
		pid, ok := guard.ParentOf(trainer)
		require.True(t, ok, "the trainer %d is gone", trainer)
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		require.NoError(t, err)
		require.Equal(t, "guard", strings.Split(string(cmdline), "\x00")[1], "the trainer's parent is its guard")
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	}

	first := r.planOf(job, 1)
	spare := r.spareOf(job, first)
	pids := started(1)
	// The prewarmed interpreters, and the replacements of those
	// generation 1 used: every node is warm.
	warmImports(5)

	// Rank 0's guard dies; its new guard's imports last.
	require.NoError(t, os.WriteFile(hold, nil, 0o644))
	killGuard(pids[0])
	second := r.planOf(job, 2)
	assert.Equal(t, map[int]string{0: spare.ID, 1: nodeOf(first, 1)}, ranksOf(second), "the spare took the cold node's rank")
	assert.Equal(t, nodeOf(first, 0), r.spareOf(job, second).ID, "the node whose guard died is the spare")
	pids = started(2)
	assert.True(t, r.node(job, nodeOf(first, 0)).Cold, "its new guard's interpreters still import")

	// Once they have imported, it is a warm spare again.
	require.NoError(t, os.Remove(hold))
	require.Eventually(t, func() bool { return !r.node(job, nodeOf(first, 0)).Cold }, time.Minute, 10*time.Millisecond,
		"the spare never said it is warm again:\n%s", r.out)
	code, stdout, stderr := cli(t, nil, "status", "--etcd-endpoints", r.endpoint, "--job", job)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, nodeOf(first, 0)+`\s+worker\s+spare\s`, stdout)
	assert.Contains(t, stdout, "Spares: 1 of 1 registered and warm, holding no rank\n")
	// The node's new guard's interpreters, and the replacements of those
	// generation 2 used.
	warmImports(8)

	// Rank 1's guard dies: the spare, warm again, takes its rank.
	require.NoError(t, os.WriteFile(hold, nil, 0o644))
	killGuard(pids[1])
	third := r.planOf(job, 3)
	assert.Equal(t, map[int]string{0: spare.ID, 1: nodeOf(first, 0)}, ranksOf(third), "the warm spare took the cold node's rank")
	assert.Equal(t, nodeOf(first, 1), r.spareOf(job, third).ID)
	started(3)
	require.NoError(t, os.Remove(hold))
	assert.Equal(t, 0, r.wait(), "generation 3 exits 0")
	data, _ := os.ReadFile(filepath.Join(dir, "imports"))
	assert.NotContains(t, string(data), "cold", "no trainer imported the module itself")
}

// nodeOf is the node of plan p's worker of rank rank.
func nodeOf(p membership.Plan, rank int) string {
	return ranksOf(p)[rank]
}

// ranksOf is plan p's workers' nodes by rank.
func ranksOf(p membership.Plan) map[int]string {
	out := map[int]string{}
	for _, m := range p.Members {
		if m.Role == membership.RoleWorker {
			out[m.Rank] = m.Node
		}
	}
	return out
}
