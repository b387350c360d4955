package integration

import (
	"encoding/json"
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
)

// warmMark is the module the warm test preloads: it notes who imported it,
// and whether that was a warm interpreter (whose sys.argv[0] is -c while
// it imports).
const warmMark = `import os, sys
IMPORTED_BY = os.getpid()
WARM = sys.argv[0] == "-c"
with open(os.path.join(os.environ["WARM_DIR"], "imports"), "a") as f:
    f.write("%d %s\n" % (os.getpid(), "warm" if WARM else "cold"))
`

// warmScript prints what it sees; in generation 1 it waits to be killed.
const warmScript = `import os, sys, time
import mark
gen, rank = os.environ["ELASTIC_GENERATION"], os.environ["RANK"]
print("warmtest gen=%s rank=%s pid=%d preloaded_by=%d warm=%s name=%s argv=%s world=%s" % (
    gen, rank, os.getpid(), mark.IMPORTED_BY, mark.WARM, __name__, ",".join(sys.argv), os.environ["WORLD_SIZE"]), flush=True)
if gen == "1":
    with open(os.path.join(os.environ["WARM_DIR"], "pid-" + rank), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
`

// With --preload, the first generation runs in warm interpreters the
// sidecars waited for before they registered; after a rank is killed the
// next generation runs in their replacements, which imported the module
// ahead of it.
func TestPreloadedGenerationRunsWarm(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mark.py"), []byte(warmMark), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "w.py"), []byte(warmScript), 0o644))
	r := startRunIn(t, dir, []string{"--np", "2", "--job", "warm", "--preload", "mark"}, []string{"python3", "w.py", "x"}, "WARM_DIR="+dir)

	imports := func(kind string) (pids []int) {
		data, _ := os.ReadFile(filepath.Join(dir, "imports"))
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if pid, k, _ := strings.Cut(line, " "); k == kind {
				n, _ := strconv.Atoi(pid)
				pids = append(pids, n)
			}
		}
		return pids
	}
	var victim int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(filepath.Join(dir, "pid-1"))
		victim, _ = strconv.Atoi(string(data))
		return err == nil && victim > 0
	}, time.Minute, 10*time.Millisecond)
	first := imports("warm")
	require.Len(t, first, 2, "generation 1 started in the interpreters warmed before the nodes joined")

	// Each rank can be found: status gives its pid, and ps and pgrep -f
	// show the user's command, not the warm bootstrap.
	var rankPids []int
	for rank := range 2 {
		var pid int
		require.Eventually(t, func() bool {
			data, err := os.ReadFile(filepath.Join(dir, "pid-"+strconv.Itoa(rank)))
			pid, _ = strconv.Atoi(string(data))
			return err == nil && pid > 0
		}, time.Minute, 10*time.Millisecond)
		rankPids = append(rankPids, pid)
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		require.NoError(t, err)
		assert.Equal(t, "python3 w.py x", strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")), "rank %d's command line", rank)
	}
	code, stdout, stderr := cli(t, nil, "status", "--etcd-endpoints", r.endpoint, "--job", "warm", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var st struct {
		Nodes []struct {
			Rank *int  `json:"rank"`
			PIDs []int `json:"pids"`
		} `json:"nodes"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &st))
	require.Len(t, st.Nodes, 2, stdout)
	for i, n := range st.Nodes {
		require.NotNil(t, n.Rank, stdout)
		assert.Equal(t, i, *n.Rank, "nodes by rank")
		assert.Equal(t, []int{rankPids[i]}, n.PIDs, "rank %d's pid in status", i)
	}
	require.Eventually(t, func() bool { return len(imports("warm")) >= 4 }, time.Minute, 20*time.Millisecond,
		"the used warm interpreters were not replaced:\n%s", r.out.String())
	warm := imports("warm")[2:]
	require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
	assert.Equal(t, 0, r.wait(), "generation 2 exits 0")

	out := r.out.String()
	for rank := range 2 {
		prefix := "[rank " + strconv.Itoa(rank) + "] warmtest gen=2 rank=" + strconv.Itoa(rank) + " pid="
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, prefix) {
				line = l
			}
		}
		require.NotEmpty(t, line, "rank %d in generation 2:\n%s", rank, out)
		pid, _, _ := strings.Cut(strings.TrimPrefix(line, prefix), " ")
		n, _ := strconv.Atoi(pid)
		assert.Contains(t, warm, n, "rank %d ran in a warm interpreter", rank)
		assert.Contains(t, line, "preloaded_by="+pid+" warm=True name=__main__ argv=w.py,x world=2")
	}
	assert.Empty(t, imports("cold"), "no trainer imported the module itself")
	for rank := range 2 {
		assert.Contains(t, out, "[rank "+strconv.Itoa(rank)+"] warmtest gen=1 rank="+strconv.Itoa(rank)+" pid=")
	}
}

// guardScript records, in a file per generation and rank, its pid and
// whether it started warm; it waits to be killed in generations 1 and 2.
const guardScript = `import os, time
import mark
gen, rank = os.environ["ELASTIC_GENERATION"], os.environ["RANK"]
with open(os.path.join(os.environ["WARM_DIR"], "gen-%s-rank-%s" % (gen, rank)), "w") as f:
    f.write("%d %s" % (os.getpid(), "warm" if mark.WARM else "cold"))
if gen in ("1", "2"):
    time.sleep(600)
`

// A guard killed alone takes its trainer and its warm interpreter with it;
// the sidecar sweeps what they left and starts a new guard at once, which
// warms while the job stops and restarts. So the next generation starts
// warm on every node, the killed guard's included, and so does the one
// after it.
func TestAKilledGuardsNodeStartsWarmAgain(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mark.py"), []byte(warmMark), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "g.py"), []byte(guardScript), 0o644))
	r := startRunIn(t, dir, []string{"--np", "2", "--job", "warmguard", "--preload", "mark"}, []string{"python3", "g.py"}, "WARM_DIR="+dir)

	// started waits for generation gen's ranks and returns their pids,
	// asserting that each started warm.
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
	imports := func() string {
		data, _ := os.ReadFile(filepath.Join(dir, "imports"))
		return string(data)
	}
	warmImports := func() int { return strings.Count(imports(), " warm\n") }

	first := started(1)
	// The interpreters generation 1 used are replaced: the idle ones die
	// with the guard as well.
	require.Eventually(t, func() bool { return warmImports() >= 4 }, time.Minute, 20*time.Millisecond,
		"the used warm interpreters were not replaced:\n%s", r.out)
	guardPid, ok := guard.ParentOf(first[0])
	require.True(t, ok, "rank 0's trainer is gone")
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(guardPid) + "/cmdline")
	require.NoError(t, err)
	require.Equal(t, "guard", strings.Split(string(cmdline), "\x00")[1], "rank 0's parent is its guard")
	require.NoError(t, syscall.Kill(guardPid, syscall.SIGKILL))

	second := started(2)
	assert.NotEqual(t, first[0], second[0], "rank 0 runs in a new process")
	// Both nodes replace the interpreters generation 2 used: 4 before, 1
	// of the new guard, 2 more now.
	require.Eventually(t, func() bool { return warmImports() >= 7 }, time.Minute, 20*time.Millisecond,
		"the used warm interpreters were not replaced:\n%s\nimports:\n%s", r.out, imports())
	require.NoError(t, syscall.Kill(second[1], syscall.SIGKILL))
	started(3)
	assert.Equal(t, 0, r.wait(), "generation 3 exits 0")
	assert.NotContains(t, imports(), "cold", "no trainer imported the module itself")
}
