package launcher_test

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// fenceCommitter is a trainer that commits a checkpoint through its fence
// (its watchdog, else its guard) at each step of a millisecond, for the
// generation ELASTIC_GENERATION less COMMIT_GENERATION_BACK, and logs each
// commit to CKPT_DIR/commits.log: the CLOCK_MONOTONIC time it asked at,
// and "ok" or the error. The checkpoint holds that time. It logs a SIGTERM
// ("term") and goes on, as a trainer saving its last checkpoints in a
// stop's grace period does.
func fenceCommitter() {
	dir := os.Getenv("CKPT_DIR")
	gen, _ := strconv.ParseInt(os.Getenv("ELASTIC_GENERATION"), 10, 64)
	back, _ := strconv.ParseInt(os.Getenv("COMMIT_GENERATION_BACK"), 10, 64)
	log, err := os.OpenFile(filepath.Join(dir, "commits.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		os.Exit(3)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	fence := guard.FenceFromEnv(os.Getenv)
	writePid("")
	for {
		select {
		case <-term:
			_, _ = fmt.Fprintf(log, "%d term\n", guard.MonoNow())
		default:
		}
		tmp := filepath.Join(dir, "ckpt.tmp")
		asked := guard.MonoNow()
		_ = os.WriteFile(tmp, []byte(strconv.FormatInt(asked, 10)), 0o600)
		result := "ok"
		if err := fence.Commit(gen-back, tmp, filepath.Join(dir, "ckpt")); err != nil {
			result = err.Error()
		}
		_, _ = fmt.Fprintf(log, "%d %s\n", asked, result)
		time.Sleep(time.Millisecond) // a training step
	}
}

// writeDeadline writes to HOST_DEADLINE_FILE, when set, a CLOCK_MONOTONIC
// time no earlier than the one the launcher put on its page for at: the
// clock is read after time.Now, whose monotonic reading at is measured
// against.
func writeDeadline(at time.Time) {
	f := os.Getenv("HOST_DEADLINE_FILE")
	if f == "" {
		return
	}
	now := time.Now()
	_ = os.WriteFile(f+".tmp", []byte(strconv.FormatInt(guard.MonoNow()+int64(at.Sub(now)), 10)), 0o600)
	_ = os.Rename(f+".tmp", f)
}

// commit is a line of a fenceCommitter's log.
type commit struct {
	asked  int64 // CLOCK_MONOTONIC ns
	result string
}

// commitLog reads the complete lines of a fenceCommitter's log.
func commitLog(t *testing.T, dir string) []commit {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "commits.log"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []commit
	for line := range strings.Lines(string(data)) {
		at, result, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		if !strings.HasSuffix(line, "\n") || !ok {
			break
		}
		asked, err := strconv.ParseInt(at, 10, 64)
		require.NoError(t, err, line)
		out = append(out, commit{asked: asked, result: result})
	}
	return out
}

// awaitCommit waits for the first commit asked after the CLOCK_MONOTONIC
// time after.
func awaitCommit(t *testing.T, dir string, after int64) commit {
	t.Helper()
	var found commit
	require.Eventually(t, func() bool {
		for _, c := range commitLog(t, dir) {
			if c.asked > after && c.result != "term" {
				found = c
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "no commit asked after that time was answered")
	return found
}

// freeze stops the processes and returns the CLOCK_MONOTONIC time by which
// all of them are stopped; they are continued when the test ends.
func freeze(t *testing.T, pids ...int) int64 {
	t.Helper()
	for _, pid := range pids {
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	}
	for _, pid := range pids {
		require.Eventually(t, func() bool { return processState(pid) == "T" }, 10*time.Second, time.Millisecond)
	}
	return guard.MonoNow()
}

// readMono reads a CLOCK_MONOTONIC time written to a file.
func readMono(t *testing.T, file string) int64 {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	require.NoError(t, err)
	return v
}

// envOf is a variable of a process's environment.
func envOf(t *testing.T, pid int, name string) (string, bool) {
	t.Helper()
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	require.NoError(t, err)
	for _, kv := range strings.Split(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// A sidecar and its guard frozen together while the trainer runs on: the
// trainer's fence watchdog answers its commits until the deadline and
// kills it there. No commit asked after the deadline is answered ok, and
// no checkpoint asked for after it is renamed.
func TestAWatchdogAnswersCommitsWhileTheSidecarAndGuardAreFrozen(t *testing.T) {
	for _, mode := range cgroupModes {
		t.Run("cgroup "+mode, func(t *testing.T) {
			dir := t.TempDir()
			host, pids := startHost(t, mode, "fencecommitter", 3*time.Second,
				"CKPT_DIR="+dir, "HOST_DEADLINE_FILE="+filepath.Join(dir, "deadline"))
			deadline := readMono(t, filepath.Join(dir, "deadline"))
			trainer := pids[0]
			watchdog := watchdogOf(t, trainer)
			require.Equal(t, "ok", awaitCommit(t, dir, 0).result)
			frozenAt := freeze(t, host.Process.Pid, guardOf(t, host.Process.Pid))
			require.Less(t, frozenAt, deadline-int64(time.Second), "the supervisors froze late: a machine too slow for this test")

			for _, pid := range []int{trainer, watchdog} {
				require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 30*time.Second, 5*time.Millisecond,
					"process %d outlived the deadline of its frozen sidecar and guard", pid)
			}
			var whileFrozen, late int
			var last int64
			for _, c := range commitLog(t, dir) {
				if c.result != "ok" {
					continue
				}
				if c.asked > frozenAt {
					whileFrozen++
					last = max(last, c.asked)
				}
				if c.asked >= deadline {
					late++
				}
			}
			t.Logf("%d commits answered while the sidecar and the guard were frozen; the last asked %v before the deadline",
				whileFrozen, time.Duration(deadline-last))
			assert.Positive(t, whileFrozen, "no commit was answered while the sidecar and the guard were frozen")
			assert.Greater(t, last, deadline-int64(time.Second), "commits stopped being answered long before the deadline")
			assert.Zero(t, late, "commits asked after the deadline were answered ok")
			assert.Less(t, readMono(t, filepath.Join(dir, "ckpt")), deadline, "a checkpoint asked for after the deadline was renamed")
		})
	}
}

// With its guard frozen, a trainer's commit of an old generation is
// refused by its watchdog, with the guard's words, and renames nothing;
// a process outside the trainer's tree is refused whatever it asks.
func TestAWatchdogRefusesACommitOfAnOldGeneration(t *testing.T) {
	dir, pidfile := t.TempDir(), filepath.Join(t.TempDir(), "pid")
	l, _ := newLauncher(t, "auto", "fencecommitter", "CKPT_DIR="+dir, "PIDFILE="+pidfile, "COMMIT_GENERATION_BACK=1")
	p := procs(1)
	_, err := l.Start(p, lease)
	require.NoError(t, err)
	trainer := readPid(t, pidfile)
	watchdogOf(t, trainer)
	awaitCommit(t, dir, 0)
	frozenAt := freeze(t, guardOf(t, os.Getpid()))

	c := awaitCommit(t, dir, frozenAt)
	assert.Equal(t, "commit refused: generation 2 is over; this node runs generation 3", c.result)
	assert.NoFileExists(t, filepath.Join(dir, "ckpt"))

	socket, ok := envOf(t, trainer, guard.EnvWatchdogSocket)
	require.True(t, ok)
	require.True(t, strings.HasPrefix(socket, "@elastic-watch-"), socket)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x"), nil, 0o600))
	err = guard.Commit(socket, p.Generation, filepath.Join(dir, "x"), filepath.Join(dir, "y"))
	assert.ErrorContains(t, err, "not a process of this trainer")
	assert.NoFileExists(t, filepath.Join(dir, "y"))
}

// A trainer whose watchdog was killed on its own commits through its guard.
func TestCommitsGoToTheGuardWhenTheWatchdogIsGone(t *testing.T) {
	dir, pidfile := t.TempDir(), filepath.Join(t.TempDir(), "pid")
	l, _ := newLauncher(t, "auto", "fencecommitter", "CKPT_DIR="+dir, "PIDFILE="+pidfile)
	_, err := l.Start(procs(1), lease)
	require.NoError(t, err)
	trainer := readPid(t, pidfile)
	watchdog := watchdogOf(t, trainer)
	require.Equal(t, "ok", awaitCommit(t, dir, 0).result)
	require.NoError(t, syscall.Kill(watchdog, syscall.SIGKILL))
	require.Eventually(t, func() bool { return !proctest.Alive(watchdog) }, 10*time.Second, time.Millisecond)

	assert.Equal(t, "ok", awaitCommit(t, dir, guard.MonoNow()).result)
	assert.True(t, proctest.Alive(trainer))
}

// In a stop's grace period the watchdog answers commits as the guard does,
// and the stop ends it with its trainer.
func TestAWatchdogAnswersCommitsInAStopsGracePeriod(t *testing.T) {
	dir, pidfile := t.TempDir(), filepath.Join(t.TempDir(), "pid")
	l, _ := newLauncher(t, "auto", "fencecommitter", "CKPT_DIR="+dir, "PIDFILE="+pidfile)
	_, err := l.Start(procs(1), lease)
	require.NoError(t, err)
	trainer := readPid(t, pidfile)
	watchdog := watchdogOf(t, trainer)
	require.Equal(t, "ok", awaitCommit(t, dir, 0).result)

	stopped := make(chan error, 1)
	go func() { stopped <- l.Stop(t.Context(), time.Second) }()
	require.Eventually(t, func() bool {
		for _, c := range commitLog(t, dir) {
			if c.result == "term" {
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "no SIGTERM")
	g := guardOf(t, os.Getpid())
	frozenAt := freeze(t, g)
	assert.Equal(t, "ok", awaitCommit(t, dir, frozenAt).result, "the watchdog answers in the grace period")

	require.NoError(t, syscall.Kill(g, syscall.SIGCONT))
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the stop did not end")
	}
	assert.False(t, proctest.Alive(trainer))
	assert.False(t, proctest.Alive(watchdog), "the watchdog was gone when the stop returned")
}
