package guard_test

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
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// trainerScript speaks an in-place trainer's side of the guard's protocol.
// It registers for generation GEN, or, as a started spare (ELASTIC_SPARE=1),
// for generation 0 once its start-up (a sleep of START seconds) is done; it
// leaves when asked (unless "deaf"), and prints each run message's
// generation, RANK and ELASTIC_SPARE. "fail" exits 3 after the start-up.
const trainerScript = `import json, os, socket, sys, time
spare = os.environ.get("ELASTIC_SPARE") == "1"
print("up", "spare" if spare else "rank", os.getpid(), flush=True)
time.sleep(float(os.environ.get("START", "0")))
if sys.argv[1:] == ["fail"]:
    sys.exit(3)
name = os.environ["ELASTIC_FENCE_SOCKET"]
s = socket.socket(socket.AF_UNIX)
s.connect("\0" + name[1:])
s.sendall((json.dumps({"op": "inplace", "generation": 0 if spare else int(os.environ["GEN"])}) + "\n").encode())
f = s.makefile("rb")
print("registered", f.readline().decode().strip(), os.getpid(), flush=True)
for line in f:
    m = json.loads(line)
    if m["op"] == "leave" and sys.argv[1:] != ["deaf"]:
        s.sendall(b'{"op":"left"}\n')
    elif m["op"] == "run":
        env = dict(kv.split("=", 1) for kv in m["env"])
        print("run", m["generation"], env["RANK"], env.get("ELASTIC_SPARE", "-"), os.getpid(), flush=True)
`

// inplaceGuard is a guard with lease 1 whose generation gen starts the
// in-place script with RANK=rank (args after the script's name).
func inplaceGuard(t *testing.T, cgroup string, args ...string) (g *testGuard, start func(gen int64, rank int) guard.Command) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "t.py"), []byte(trainerScript), 0o644))
	g = startGuard(t, cgroup)
	g.send(guard.Command{Op: guard.OpDeadline, Lease: 1, KillAt: guard.MonoNow() + int64(time.Hour)})
	argv := append([]string{"python3", "t.py"}, args...)
	return g, func(gen int64, rank int) guard.Command {
		env := append(os.Environ(), "GEN="+strconv.FormatInt(gen, 10), "RANK="+strconv.Itoa(rank))
		return guard.Command{Op: guard.OpStart, Lease: 1, Generation: gen, Procs: []guard.Proc{
			{Rank: rank, Path: py, Argv: argv, Dir: dir, Env: env, Prefix: "[rank " + strconv.Itoa(rank) + "] "}}}
	}
}

// registered waits until the trainer pid says its registration's answer.
func (g *testGuard) registered(pid int, answer string) {
	g.t.Helper()
	require.Eventually(g.t, func() bool {
		return strings.Contains(g.out.String(), "registered "+answer+" "+strconv.Itoa(pid))
	}, 30*time.Second, 5*time.Millisecond, "output:\n%s", g.out.String())
}

// A stop asks an in-place trainer to leave: it is parked, alive and no
// child the clear waits for, and the next start hands it the generation's
// environment instead of starting its slot again.
func TestAnInPlaceTrainerIsParkedAndStartedAgainInPlace(t *testing.T) {
	for _, mode := range []string{"auto", "off"} {
		t.Run("cgroup "+mode, func(t *testing.T) {
			g, start := inplaceGuard(t, mode)
			g.send(start(1, 0))
			pid := g.next(guard.EventStarted).Pids[0]
			g.registered(pid, "ok")

			seq := g.send(guard.Command{Op: guard.OpStop, GraceNanos: int64(10 * time.Second)})
			parked := g.next(guard.EventParked)
			assert.Equal(t, pid, parked.Pid)
			assert.Equal(t, int64(1), parked.Generation)
			assert.Equal(t, seq, g.next(guard.EventClear).Seq, "the clear does not wait for a parked trainer")
			assert.True(t, proctest.Alive(pid), "the parked trainer lives")

			g.send(start(2, 3))
			st := g.next(guard.EventStarted)
			assert.Equal(t, []int{pid}, st.Pids, "the slot's process is the parked trainer")
			assert.Equal(t, 1, st.InPlace)
			require.Eventually(t, func() bool { return strings.Contains(g.out.String(), "[rank 3] run 2 3 - "+strconv.Itoa(pid)) },
				30*time.Second, 5*time.Millisecond, "output:\n%s", g.out.String())

			// And again: generation 2's stop parks it once more.
			g.send(guard.Command{Op: guard.OpStop, GraceNanos: int64(10 * time.Second)})
			assert.Equal(t, int64(2), g.next(guard.EventParked).Generation)
		})
	}
}

// A parked trainer holds no rank but is fenced like any process: the
// node's kill takes it, and one that was stopped (it may have been frozen
// across a fence) is killed at once, its slot started anew.
func TestAParkedTrainerIsFenced(t *testing.T) {
	t.Run("kill", func(t *testing.T) {
		g, start := inplaceGuard(t, "auto")
		g.send(start(1, 0))
		pid := g.next(guard.EventStarted).Pids[0]
		g.registered(pid, "ok")
		g.send(guard.Command{Op: guard.OpStop, GraceNanos: int64(10 * time.Second)})
		g.next(guard.EventParked)
		g.next(guard.EventClear)

		seq := g.send(guard.Command{Op: guard.OpKill})
		assert.Equal(t, seq, g.next(guard.EventClear).Seq)
		assert.False(t, proctest.Alive(pid), "the fence killed the parked trainer")
	})
	t.Run("stopped", func(t *testing.T) {
		g, start := inplaceGuard(t, "auto")
		g.send(start(1, 0))
		pid := g.next(guard.EventStarted).Pids[0]
		g.registered(pid, "ok")
		g.send(guard.Command{Op: guard.OpStop, GraceNanos: int64(10 * time.Second)})
		g.next(guard.EventParked)
		g.next(guard.EventClear)

		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 30*time.Second, 5*time.Millisecond,
			"a parked trainer that was stopped is killed")
		g.send(start(2, 0))
		st := g.next(guard.EventStarted)
		assert.NotEqual(t, []int{pid}, st.Pids)
		assert.Zero(t, st.InPlace, "its slot started anew")
	})
}

// A trainer that does not leave within the stop's grace period is killed
// as any process, and its slot starts anew.
func TestAnInPlaceTrainerThatDoesNotLeaveIsKilled(t *testing.T) {
	g, start := inplaceGuard(t, "auto", "deaf")
	g.send(start(1, 0))
	pid := g.next(guard.EventStarted).Pids[0]
	g.registered(pid, "ok")
	seq := g.send(guard.Command{Op: guard.OpStop, GraceNanos: int64(300 * time.Millisecond)})
	exit := g.next(guard.EventExit)
	assert.Equal(t, pid, exit.Pid)
	assert.Equal(t, int(syscall.SIGKILL), exit.Signal)
	assert.Equal(t, seq, g.next(guard.EventClear).Seq)
	g.send(start(2, 0))
	assert.Zero(t, g.next(guard.EventStarted).InPlace)
}

// Only the current generation's own processes register: a wrong
// generation is refused, and the trainer runs on as any process.
func TestAnInPlaceRegistrationOfAnotherGenerationIsRefused(t *testing.T) {
	g, start := inplaceGuard(t, "auto")
	c := start(2, 0)
	for i := range c.Procs {
		c.Procs[i].Env = append(c.Procs[i].Env, "GEN=1")
	}
	g.send(c)
	pid := g.next(guard.EventStarted).Pids[0]
	g.registered(pid, "refused: generation 1 is not the one this node runs")
	g.send(guard.Command{Op: guard.OpStop, GraceNanos: int64(10 * time.Second)})
	assert.Equal(t, pid, g.next(guard.EventExit).Pid, "it was stopped, not parked")
}

// spareGuard is a guard with lease 1 that keeps a started spare of the
// spare script (args after its name) in slot 0, whose start-up lasts
// start; its generation gen starts the same command with RANK=rank.
func spareGuard(t *testing.T, start string, args ...string) (g *testGuard, startGen func(gen int64, rank int) guard.Command) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "t.py"), []byte(trainerScript), 0o644))
	g = startGuard(t, "auto")
	g.send(guard.Command{Op: guard.OpDeadline, Lease: 1, KillAt: guard.MonoNow() + int64(time.Hour)})
	argv := append([]string{"python3", "t.py"}, args...)
	base := append(os.Environ(), "START="+start)
	g.send(guard.Command{Op: guard.OpSpare, Spares: []guard.Proc{{Rank: 0, Path: py, Argv: argv, Dir: dir, Env: base}}})
	return g, func(gen int64, rank int) guard.Command {
		env := append(base, "GEN="+strconv.FormatInt(gen, 10), "RANK="+strconv.Itoa(rank))
		return guard.Command{Op: guard.OpStart, Lease: 1, Generation: gen, Procs: []guard.Proc{
			{Rank: rank, Path: py, Argv: argv, Dir: dir, Env: env, Prefix: "[rank " + strconv.Itoa(rank) + "] "}}}
	}
}

// A started spare runs the command ahead with no rank, is parked once its
// start-up is done, and becomes the next start's process, which it learns
// from the run message; the clear never waits for it.
func TestAStartedSpareIsTheNextStartsProcess(t *testing.T) {
	g, start := spareGuard(t, "0")
	parked := g.next(guard.EventParked)
	assert.Zero(t, parked.Generation, "a spare left no generation")
	g.registered(parked.Pid, "ok")
	assert.Contains(t, g.out.String(), "[spare 0] up spare "+strconv.Itoa(parked.Pid))

	g.send(start(1, 4))
	assert.Equal(t, parked.Pid, g.next(guard.EventUnparked).Pid, "the slot's parked trainer is used")
	st := g.next(guard.EventStarted)
	assert.Equal(t, []int{parked.Pid}, st.Pids)
	assert.Equal(t, 1, st.InPlace)
	require.Eventually(t, func() bool {
		return strings.Contains(g.out.String(), "[rank 4] run 1 4 - "+strconv.Itoa(parked.Pid))
	}, 30*time.Second, 5*time.Millisecond, "the run's environment is the generation's, without ELASTIC_SPARE:\n%s", g.out.String())
}

// A start that comes while the spare is still in its start-up makes it
// the rank all the same: its registration is answered with the run.
func TestAStartedSpareStillStartingIsTheRank(t *testing.T) {
	g, start := spareGuard(t, "1")
	var pid int
	require.Eventually(t, func() bool {
		_, err := fmt.Sscanf(lastLine(g.out.String(), "[spare 0] up spare "), "%d", &pid)
		return err == nil
	}, 30*time.Second, 5*time.Millisecond, "the spare never started:\n%s", g.out.String())
	g.send(start(1, 2))
	assert.Equal(t, []int{pid}, g.next(guard.EventStarted).Pids, "the spare in its start-up is the rank")
	require.Eventually(t, func() bool {
		return strings.Contains(g.out.String(), "[rank 2] run 1 2 - "+strconv.Itoa(pid))
	}, 30*time.Second, 5*time.Millisecond, "output:\n%s", g.out.String())
}

// A spare that exits before it reaches its registration is reported
// with its exit code, and not started again.
func TestAStartedSpareThatFailsIsReported(t *testing.T) {
	g, _ := spareGuard(t, "0", "fail")
	lost := g.next(guard.EventSpareLost)
	assert.Equal(t, 3, lost.Code)
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, 1, strings.Count(g.out.String(), "up spare"), "no second spare:\n%s", g.out.String())
}

// lastLine is what follows the last prefix in out, up to its line's end;
// "" when out has none.
func lastLine(out, prefix string) string {
	i := strings.LastIndex(out, prefix)
	if i < 0 {
		return ""
	}
	rest := out[i+len(prefix):]
	if j := strings.IndexByte(rest, '\n'); j >= 0 {
		return rest[:j]
	}
	return ""
}
