package launcher_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/launcher"
)

// preloadModule is the module the warm tests preload: it notes each import
// with the importing process and whether it was a warm interpreter (whose
// sys.argv[0] is -c while it imports), and keeps the pid it was imported by.
const preloadModule = `import os, sys
IMPORTED_BY = os.getpid()
with open(os.path.join(os.environ["WARM_DIR"], "imports"), "a") as f:
    f.write("%d %s\n" % (os.getpid(), "warm" if sys.argv[0] == "-c" else "cold"))
`

// trainScript prints what it sees, then does what MODE says.
// Its command line, as ps shows it, is printed with "_" for a space.
const trainScript = `import os, signal, sys, time
import warmmark
with open("/proc/self/cmdline", "rb") as f:
    cmdline = f.read().replace(b"\0", b" ").strip().decode().replace(" ", "_")
print("pid=%d preloaded_by=%d rank=%s gen=%s name=%s argv=%s cwd=%s keep=%s cmdline=%s" % (
    os.getpid(), warmmark.IMPORTED_BY, os.environ.get("RANK"), os.environ.get("ELASTIC_GENERATION"),
    __name__, ",".join(sys.argv), os.getcwd(), os.environ.get("KEEP"), cmdline), flush=True)
mode = os.environ.get("MODE", "ok")
if mode == "raise" and os.environ.get("RANK") == "1":
    raise ValueError("boom")
if mode == "exit" and os.environ.get("RANK") == "1":
    sys.exit(7)
if mode == "wait":
    with open(os.path.join(os.environ["WARM_DIR"], "running-%s" % os.environ["RANK"]), "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(1)
`

// pythonForTests is a Python interpreter; missing, the test is skipped,
// and fails in CI.
func pythonForTests(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 is missing: %v", err)
		}
		t.Skipf("python3 is missing: %v", err)
	}
	return path
}

// warmJob is a launcher of trainScript with warmmark preloaded.
type warmJob struct {
	l   *launcher.Launcher
	out *proctest.Buffer
	dir string
}

func newWarmJob(t *testing.T, cgroup string) *warmJob {
	t.Helper()
	j := newUnleasedWarmJob(t, cgroup, "warmmark")
	require.NoError(t, j.l.SetDeadline(lease, time.Now().Add(time.Hour)))
	return j
}

// newUnleasedWarmJob is a launcher of trainScript preloading modules, with
// no deadline yet, as a sidecar's before it registers.
func newUnleasedWarmJob(t *testing.T, cgroup string, modules ...string) *warmJob {
	t.Helper()
	py := pythonForTests(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "warmmark.py"), []byte(preloadModule), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "train.py"), []byte(trainScript), 0o644))
	out := &proctest.Buffer{}
	l, err := launcher.New(launcher.Config{
		Command: []string{filepath.Base(py), "-u", "train.py", "a1"}, Dir: dir,
		Env:    append(os.Environ(), "WARM_DIR="+dir, "KEEP=base", "PATH="+filepath.Dir(py)+":"+os.Getenv("PATH")),
		Stdout: out, Stderr: out, Guard: guardCommand(cgroup), Preload: modules,
	})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	return &warmJob{l: l, out: out, dir: dir}
}

// imports are the pids that imported warmmark, by kind (warm or cold), in
// order.
func (j *warmJob) imports() map[string][]int {
	data, _ := os.ReadFile(filepath.Join(j.dir, "imports"))
	out := map[string][]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if pid, kind, ok := strings.Cut(line, " "); ok {
			n, _ := strconv.Atoi(pid)
			out[kind] = append(out[kind], n)
		}
	}
	return out
}

// warmReady waits until n warm interpreters have imported warmmark in all,
// and returns the last two's pids of those still alive.
func (j *warmJob) warmReady(t *testing.T, n int) []int {
	t.Helper()
	require.Eventually(t, func() bool { return len(j.imports()["warm"]) >= n }, 30*time.Second, 10*time.Millisecond,
		"%d warm interpreters never imported the preload; output:\n%s", n, j.out.String())
	warm := j.imports()["warm"]
	return warm[len(warm)-2:]
}

// run starts generation gen of two ranks from 0 with the variables given
// to each, and returns the exit channel.
func (j *warmJob) run(t *testing.T, gen int64, vars ...string) <-chan launcher.Exit {
	t.Helper()
	p := procsOf(gen, 0, 2)
	for i := range p.Env {
		p.Env[i] = append(p.Env[i], vars...)
	}
	exits, err := j.l.Start(p, lease)
	require.NoError(t, err)
	return exits
}

// printed is the line rank printed in generation gen.
func (j *warmJob) printed(t *testing.T, rank int, gen int64) map[string]string {
	t.Helper()
	var fields map[string]string
	require.Eventually(t, func() bool {
		for _, line := range lines(j.out) {
			rest, ok := strings.CutPrefix(line, "[rank "+strconv.Itoa(rank)+"] pid=")
			if !ok {
				continue
			}
			fields = map[string]string{}
			for _, kv := range strings.Fields("pid=" + rest) {
				k, v, _ := strings.Cut(kv, "=")
				fields[k] = v
			}
			if fields["gen"] == strconv.FormatInt(gen, 10) {
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "rank %d printed nothing in generation %d:\n%s", rank, gen, j.out.String())
	return fields
}

// A preloaded interpreter becomes the user's script with the generation's
// environment, its own argv, cwd and __name__, having imported the module
// once, before the generation. A guard that has started nothing warms at
// once: the first generation runs in interpreters warmed with it.
func TestAWarmInterpreterBecomesTheScript(t *testing.T) {
	for _, mode := range cgroupModes {
		t.Run("cgroup "+mode, func(t *testing.T) {
			j := newWarmJob(t, mode)
			assert.Equal(t, 0, wait(t, j.run(t, 3)).Code)
			first := j.warmReady(t, 2)
			for rank := range 2 {
				pid, _ := strconv.Atoi(j.printed(t, rank, 3)["pid"])
				assert.Contains(t, first, pid, "rank %d of the first generation ran in a warm interpreter", rank)
			}
			warm := j.warmReady(t, 4)
			for _, pid := range warm {
				// An idle warm interpreter says what it is, not its
				// bootstrap's source, and not the user's command.
				assert.Equal(t, "python3 [warm interpreter, preloaded: warmmark]", cmdline(pid))
			}

			assert.Equal(t, 0, wait(t, j.run(t, 4)).Code)
			for rank := range 2 {
				f := j.printed(t, rank, 4)
				pid, _ := strconv.Atoi(f["pid"])
				assert.Contains(t, warm, pid, "rank %d ran in a warm interpreter", rank)
				assert.Equal(t, f["pid"], f["preloaded_by"], "the module was imported before, by the same process")
				assert.Equal(t, strconv.Itoa(rank), f["rank"])
				assert.Equal(t, "__main__", f["name"])
				assert.Equal(t, "train.py,a1", f["argv"])
				assert.Equal(t, j.dir, f["cwd"])
				assert.Equal(t, "base", f["keep"])
				// ps and pgrep -f show the user's command, as for a
				// cold start.
				assert.Equal(t, "python3_-u_train.py_a1", f["cmdline"])
			}
			assert.Empty(t, j.imports()["cold"], "a warm generation imports nothing again")
			assert.Len(t, j.imports()["warm"], 4, "each warm interpreter imported the module once")
		})
	}
}

// Prewarm, before the node's first lease, returns once every warm
// interpreter has imported its preloads; they outlive the first deadline,
// and the first generation runs on them.
func TestPrewarmMakesTheFirstGenerationWarm(t *testing.T) {
	j := newUnleasedWarmJob(t, "auto", "warmmark")
	ready, err := j.l.Prewarm(t.Context(), 2)
	require.NoError(t, err)
	assert.Equal(t, 2, ready)
	warm := j.imports()["warm"]
	require.Len(t, warm, 2, "both imported the preload when Prewarm returned")

	require.NoError(t, j.l.SetDeadline(lease, time.Now().Add(time.Hour)))
	assert.Equal(t, 0, wait(t, j.run(t, 1)).Code)
	for rank := range 2 {
		pid, _ := strconv.Atoi(j.printed(t, rank, 1)["pid"])
		assert.Contains(t, warm, pid, "rank %d ran in a warm interpreter", rank)
	}
	assert.Empty(t, j.imports()["cold"], "the first generation started warm")
}

// Interpreters warmed before the first lease are fenced with it: its
// deadline passing kills them.
func TestPrewarmedInterpretersDieWithTheFirstLease(t *testing.T) {
	j := newUnleasedWarmJob(t, "auto", "warmmark")
	ready, err := j.l.Prewarm(t.Context(), 2)
	require.NoError(t, err)
	require.Equal(t, 2, ready)
	warm := j.imports()["warm"]
	require.NoError(t, j.l.SetDeadline(lease, time.Now().Add(300*time.Millisecond)))
	for _, pid := range warm {
		require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 10*time.Second, 5*time.Millisecond,
			"the warm interpreter %d outlived the deadline", pid)
	}
}

// A preload that cannot be imported ends Prewarm at once, with nothing
// ready: the node joins and starts cold.
func TestPrewarmOfAPreloadThatFailsReturnsAtOnce(t *testing.T) {
	j := newUnleasedWarmJob(t, "auto", "warmmark", "no_such_module_here")
	ready, err := j.l.Prewarm(t.Context(), 2)
	require.NoError(t, err)
	assert.Equal(t, 0, ready)
	assert.Contains(t, j.out.String(), "ModuleNotFoundError")
}

// Exit codes, SystemExit and an uncaught exception's traceback pass
// through a warm interpreter as through a cold one.
func TestAWarmInterpretersExitIsTheScripts(t *testing.T) {
	j := newWarmJob(t, "auto")
	wait(t, j.run(t, 3))
	j.warmReady(t, 4)
	e := wait(t, j.run(t, 4, "MODE=exit"))
	assert.Equal(t, launcher.Exit{Code: 7, Message: "rank 1: exited with code 7"}, e)

	j.warmReady(t, 6)
	e = wait(t, j.run(t, 5, "MODE=raise"))
	assert.Equal(t, 1, e.Code)
	out := j.out.String()
	assert.Contains(t, out, "[rank 1] Traceback (most recent call last):")
	assert.Contains(t, out, `[rank 1]   File "`+filepath.Join(j.dir, "train.py")+`", line 10, in <module>`)
	assert.Contains(t, out, "[rank 1] ValueError: boom")
	assert.NotContains(t, out, "_warm", "the bootstrap's frames are not shown")
	assert.Empty(t, j.imports()["cold"])
}

// A stop of a generation keeps the idle warm interpreters; after a rank is
// killed, the next generation runs on them.
func TestAfterARankIsKilledTheNextGenerationRunsWarm(t *testing.T) {
	j := newWarmJob(t, "auto")
	wait(t, j.run(t, 3))
	j.warmReady(t, 4)
	exits := j.run(t, 4, "MODE=wait")
	replacements := j.warmReady(t, 6)
	victim := readPid(t, filepath.Join(j.dir, "running-1"))
	require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
	assert.Equal(t, 137, wait(t, exits).Code)
	require.NoError(t, j.l.Stop(t.Context(), time.Second))
	for _, pid := range replacements {
		assert.True(t, proctest.Alive(pid), "stop keeps the idle warm interpreter %d", pid)
	}

	assert.Equal(t, 0, wait(t, j.run(t, 5)).Code)
	for rank := range 2 {
		f := j.printed(t, rank, 5)
		pid, _ := strconv.Atoi(f["pid"])
		assert.Contains(t, replacements, pid)
		assert.Equal(t, f["pid"], f["preloaded_by"])
	}
}

// A guard that dies by itself (SIGKILL from outside) takes its trainers and
// warm interpreters with it. The launcher sweeps what they left, starts a
// new guard, which warms the node's interpreters at once, and only then
// tells the processes' end: the next start runs in those interpreters,
// and nothing imports the preload cold.
func TestAGuardThatDiesIsReplacedWithItsWarmInterpreters(t *testing.T) {
	for _, mode := range cgroupModes {
		t.Run("cgroup "+mode, func(t *testing.T) {
			j := newWarmJob(t, mode)
			wait(t, j.run(t, 3))
			j.warmReady(t, 4)
			exits := j.run(t, 4, "MODE=wait")
			victim := readPid(t, filepath.Join(j.dir, "running-0"))
			dead, ok := guard.ParentOf(victim)
			require.True(t, ok)
			before := len(j.imports()["warm"])
			require.NoError(t, syscall.Kill(dead, syscall.SIGKILL))
			assert.Equal(t, launcher.Exit{Code: 137, Message: "the process guard died"}, wait(t, exits))
			// Without a start: the new guard warms as soon as it runs.
			replacements := j.warmReady(t, before+2)
			for _, pid := range replacements {
				parent, _ := guard.ParentOf(pid)
				assert.NotEqual(t, dead, parent, "warm interpreter %d is the new guard's", pid)
			}

			assert.Equal(t, 0, wait(t, j.run(t, 5)).Code)
			for rank := range 2 {
				f := j.printed(t, rank, 5)
				pid, _ := strconv.Atoi(f["pid"])
				assert.Contains(t, replacements, pid, "rank %d ran in the new guard's warm interpreter", rank)
				assert.Equal(t, f["pid"], f["preloaded_by"])
			}
			assert.Empty(t, j.imports()["cold"])
		})
	}
}

// A warm interpreter that was stopped, and one stopped and continued, are
// killed and never run a generation.
func TestAFrozenWarmInterpreterIsNeverUsed(t *testing.T) {
	j := newWarmJob(t, "auto")
	wait(t, j.run(t, 3))
	warm := j.warmReady(t, 4)
	require.NoError(t, syscall.Kill(warm[0], syscall.SIGSTOP))
	require.NoError(t, syscall.Kill(warm[1], syscall.SIGSTOP))
	// Continued once it stopped: a stop still pending is discarded by
	// SIGCONT, and the process was never frozen.
	require.Eventually(t, func() bool { st := processState(warm[1]); return st == "T" || !proctest.Alive(warm[1]) },
		10*time.Second, time.Millisecond)
	_ = syscall.Kill(warm[1], syscall.SIGCONT) // gone already if the guard was quick
	for _, pid := range warm {
		require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 10*time.Second, 5*time.Millisecond,
			"the guard killed the frozen warm interpreter %d (%s); output:\n%s", pid, processState(pid), j.out.String())
	}
	assert.Equal(t, 0, wait(t, j.run(t, 4)).Code)
	for rank := range 2 {
		pid, _ := strconv.Atoi(j.printed(t, rank, 4)["pid"])
		assert.NotContains(t, warm, pid)
	}
}

// A fence (a kill, or the deadline passing) kills the warm interpreters
// too; they come back only under a new deadline.
func TestAFenceKillsTheWarmInterpreters(t *testing.T) {
	t.Run("kill", func(t *testing.T) {
		j := newWarmJob(t, "auto")
		wait(t, j.run(t, 3))
		warm := j.warmReady(t, 4)
		require.NoError(t, j.l.Kill(t.Context()))
		for _, pid := range warm {
			assert.False(t, proctest.Alive(pid), "warm interpreter %d is dead when Kill returns", pid)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		j := newWarmJob(t, "auto")
		wait(t, j.run(t, 3))
		warm := j.warmReady(t, 4)
		require.NoError(t, j.l.SetDeadline(lease, time.Now()))
		for _, pid := range warm {
			require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 10*time.Second, 5*time.Millisecond)
		}
		require.NoError(t, j.l.SetDeadline(lease+1, time.Now().Add(time.Hour)))
		again := j.warmReady(t, 6)
		assert.False(t, slices.Contains(warm, again[0]))
	})
}

// Without a Python interpreter as the program, --preload does not apply:
// the command starts cold, as without it.
func TestPreloadIsIgnoredForAnotherProgram(t *testing.T) {
	out := &proctest.Buffer{}
	l, err := launcher.New(launcher.Config{
		Command: []string{os.Args[0], "-test.run=^$"}, Env: append(os.Environ(), "LAUNCHER_TEST_CHILD=env"),
		Stdout: out, Stderr: out, Guard: guardCommand("auto"), Preload: []string{"torch"},
	})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	require.NoError(t, l.SetDeadline(lease, time.Now().Add(time.Hour)))
	exits, err := l.Start(procs(1), lease)
	require.NoError(t, err)
	assert.Equal(t, 0, wait(t, exits).Code)
	cold, _ := l.Cold()
	assert.False(t, cold, "nothing starts warm, so nothing is cold either")

	_, err = launcher.New(launcher.Config{Command: []string{"python3", "x.py"}, Guard: guardCommand("auto"), Preload: []string{"a-b"}})
	require.ErrorContains(t, err, `preload "a-b": not a Python module name`)
}

// cmdline is a process's command line as ps shows it.
func cmdline(pid int) string {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))
}
