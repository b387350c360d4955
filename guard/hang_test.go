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
	"github.com/elastictraining/coordinator/memckpt"
)

// standin is a trainer as the Python side of hang detection makes it: it
// maps its progress page from ELASTIC_PROGRESS_FD, writes its pid, and
// registers faulthandler on a signal that it writes into word 56. Then it
// does what its arguments say, in order:
//
//	step N MS     N steps, MS milliseconds apart
//	forever MS    a step every MS milliseconds, until killed
//	name K        names step K (elastic.beat(step=K))
//	quiet S       declares a quiet phase of S seconds
//	until FILE    a step every 10 ms until FILE exists
//	touch FILE    creates FILE
//	trace         forks a child that attaches the page, and traces it
//	stopchild     forks a child that attaches the page and stops itself
//	wait          waits until killed
//	inplace G     registers as generation G's in-place trainer, and leaves
//	              when asked, from a thread: the main thread may wait on
//	inplace G deaf  the same, but never leaves
//
// On SIGTERM it says "got term" and exits 0.
const standin = `import faulthandler, mmap, os, signal, struct, sys, time

fd = os.environ.pop("ELASTIC_PROGRESS_FD", None)
if fd is not None:
    mm = mmap.mmap(int(fd), 4096)
    os.close(int(fd))
    how = "fd=" + fd
else:
    # A warm interpreter's bootstrap attached it (guard/warm.py).
    mm, how = sys.modules["elastic.progress"]._mapping, "attached"
struct.pack_into("<Q", mm, 64, os.getpid())
dump = signal.SIGRTMIN + 6
faulthandler.register(dump, all_threads=True, file=sys.stderr, chain=False)
struct.pack_into("<Q", mm, 56, os.getpid() | (int(dump) << 32))
magic, gen = struct.unpack_from("<8sQ", mm, 0)
print("page %s magic=%s gen=%d" % (how, magic.rstrip(b"\0").decode(), gen), flush=True)

def term(*_):
    print("got term", flush=True)
    sys.exit(0)

signal.signal(signal.SIGTERM, term)
steps = 0

words = memoryview(mm).cast("Q")  # whole words, as the real module writes them

def step():
    global steps
    steps += 1
    t = time.monotonic_ns()
    words[3] = t  # last step
    words[4] = t  # last activity
    words[2] = steps

def child(then):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        struct.pack_into("<Q", mm, 64, os.getpid())
        os.write(w, b"x")
        then()
        while True:
            time.sleep(3600)
    os.read(r, 1)
    return pid

args, i = sys.argv[1:], 0
while i < len(args):
    cmd = args[i]
    i += 1
    if cmd == "step":
        for _ in range(int(args[i])):
            step()
            time.sleep(float(args[i + 1]) / 1000)
        i += 2
    elif cmd == "forever":
        while True:
            step()
            time.sleep(float(args[i]) / 1000)
    elif cmd == "name":
        struct.pack_into("<Q", mm, 40, int(args[i]))
        i += 1
    elif cmd == "quiet":
        struct.pack_into("<Q", mm, 48, time.monotonic_ns() + int(float(args[i]) * 1e9))
        i += 1
    elif cmd == "until":
        while not os.path.exists(args[i]):
            step()
            time.sleep(0.01)
        i += 1
    elif cmd == "touch":
        open(args[i], "w").close()
        i += 1
    elif cmd == "trace":
        import ctypes
        pid = child(lambda: None)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
            print("ptrace refused: errno %d" % ctypes.get_errno(), flush=True)
            sys.exit(3)
        os.waitpid(pid, 0)
        print("traced %d" % pid, flush=True)
    elif cmd == "stopchild":
        pid = child(lambda: os.kill(os.getpid(), signal.SIGSTOP))
        print("child %d" % pid, flush=True)
    elif cmd == "inplace":
        import json, socket, threading
        gen, deaf = int(args[i]), args[i + 1:i + 2] == ["deaf"]
        i += 2 if deaf else 1
        name = os.environ["ELASTIC_FENCE_SOCKET"]
        sock = socket.socket(socket.AF_UNIX)
        sock.connect("\0" + name[1:])
        sock.sendall((json.dumps({"op": "inplace", "generation": gen}) + "\n").encode())
        lines = sock.makefile("rb")
        print("registered", lines.readline().decode().strip(), flush=True)

        def listen():
            for line in lines:
                if json.loads(line)["op"] == "leave" and not deaf:
                    print("leaving", flush=True)
                    sock.sendall(b'{"op":"left"}\n')

        threading.Thread(target=listen, daemon=True).start()
    elif cmd == "wait":
        while True:
            time.sleep(3600)
`

// hangJob is a guard with a lease, and the stand-in ready to run.
type hangJob struct {
	*testGuard
	py, script, dir string
	seen            []guard.Report // every report until() read
}

func newHangJob(t *testing.T) *hangJob {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "standin.py")
	require.NoError(t, os.WriteFile(script, []byte(standin), 0o644))
	g := startGuard(t, "auto")
	g.send(guard.Command{Op: guard.OpDeadline, Lease: 1, KillAt: guard.MonoNow() + int64(time.Hour)})
	return &hangJob{testGuard: g, py: py, script: script, dir: dir}
}

// proc is rank running the stand-in with args.
func (j *hangJob) proc(rank int, args ...string) guard.Proc {
	return guard.Proc{Rank: rank, Path: j.py, Argv: append([]string{"python3", "-u", j.script}, args...), Dir: j.dir,
		Env: os.Environ(), Prefix: "[rank " + strconv.Itoa(rank) + "] "}
}

// start starts generation gen of procs, watched by w, and returns their
// pids.
func (j *hangJob) start(gen int64, w *guard.Watch, procs ...guard.Proc) []int {
	j.t.Helper()
	seq := j.send(guard.Command{Op: guard.OpStart, Lease: 1, Generation: gen, Procs: procs, Watch: w})
	reps := j.until(func(r guard.Report) bool {
		return r.Seq == seq && (r.Event == guard.EventStarted || r.Event == guard.EventStartFailed)
	})
	st := reps[len(reps)-1]
	require.Equal(j.t, guard.EventStarted, st.Event, st.Error)
	require.Len(j.t, st.Pids, len(procs))
	return st.Pids
}

// until reads reports until match says one is the one, and returns those
// it read, that one last.
func (j *hangJob) until(match func(guard.Report) bool) []guard.Report {
	j.t.Helper()
	var got []guard.Report
	timeout := time.After(30 * time.Second)
	for {
		select {
		case rep, ok := <-j.reports:
			require.True(j.t, ok, "the guard exited; output:\n%s", j.out.String())
			got = append(got, rep)
			j.seen = append(j.seen, rep)
			if match(rep) {
				return got
			}
		case <-timeout:
			var hung []string
			for _, r := range j.seen {
				switch r.Event {
				case guard.EventHung:
					hung = append(hung, fmt.Sprintf("rank %d hung at step %d, quiet %d, timeout %d", r.Rank, r.Step, r.QuietNanos, r.TimeoutNanos))
				case guard.EventProgress:
					for _, p := range r.Progress {
						hung = append(hung, fmt.Sprintf("progress: rank %d steps %d step %d", p.Rank, p.Steps, p.Step))
					}
				}
			}
			j.t.Fatalf("not reported (reports: %v; %d in all); output:\n%s", hung, len(j.seen), j.out.String())
		}
	}
}

// find returns the first report, read already or not, that match says is
// the one.
func (j *hangJob) find(match func(guard.Report) bool) guard.Report {
	j.t.Helper()
	for _, r := range j.seen {
		if match(r) {
			return r
		}
	}
	reps := j.until(match)
	return reps[len(reps)-1]
}

// hungRank matches the report of rank's hang.
func hungRank(rank int) func(guard.Report) bool {
	return func(r guard.Report) bool { return r.Event == guard.EventHung && r.Rank == rank }
}

// stop stops the run as c says and returns every report until it is
// clear.
func (j *hangJob) stop(c guard.Command) []guard.Report {
	j.t.Helper()
	c.Op = guard.OpStop
	seq := j.send(c)
	return j.until(func(r guard.Report) bool { return r.Event == guard.EventClear && r.Seq >= seq })
}

// of are the reports of event ev among reps, by rank; hangs are counted.
func of(ev guard.Event, reps []guard.Report) (byRank map[int]guard.Report, count map[int]int) {
	byRank, count = map[int]guard.Report{}, map[int]int{}
	for _, r := range reps {
		if r.Event == ev {
			byRank[r.Rank] = r
			count[r.Rank]++
		}
	}
	return byRank, count
}

// printed waits until the output holds s.
func (j *hangJob) printed(s string) {
	j.t.Helper()
	require.Eventually(j.t, func() bool { return strings.Contains(j.out.String(), s) }, 30*time.Second, 5*time.Millisecond,
		"no %q; output:\n%s", s, j.out.String())
}

// lineOf is the first line of the output holding s.
func (j *hangJob) lineOf(s string) string {
	for _, line := range strings.Split(j.out.String(), "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// fixed is the watch of most tests: a fixed 300 ms timeout, no startup
// budget.
var fixed = &guard.Watch{TimeoutNanos: int64(300 * time.Millisecond), StartupNanos: 0}

// A rank that steps and then stops stepping is reported hung once the
// fixed timeout passed, at the step it named, or its count; a rank that
// never steps, under a startup budget, once the budget passed. Progress
// says how far each got. Rank 0 names its step before its last count, as
// the trainers' module does: a step named after the last count is seen
// by a hang report, but no progress report may follow it.
//
// The ranks that step have a startup budget longer than their start can
// take on a loaded machine (an interpreter that takes more than the
// budget to its first step is hung before it, and reported twice); the
// rank that never steps runs in a generation of its own, with a short one.
func TestAQuietRankIsReportedHung(t *testing.T) {
	j := newHangJob(t)
	w := &guard.Watch{TimeoutNanos: int64(300 * time.Millisecond), StartupNanos: int64(time.Minute), Expect: true}
	pids := j.start(1, w, j.proc(0, "step", "4", "20", "name", "42", "step", "1", "20", "wait"), j.proc(1, "step", "3", "20", "wait"))

	j.until(func(guard.Report) bool { got, _ := of(guard.EventHung, j.seen); return len(got) == 2 })
	got, _ := of(guard.EventHung, j.seen)
	for rank, want := range map[int]struct {
		step    int64
		counted bool
	}{0: {42, false}, 1: {3, true}} {
		h := got[rank]
		assert.Equal(t, pids[rank], h.Pid, "rank %d", rank)
		assert.Equal(t, int64(1), h.Generation)
		assert.Equal(t, want.step, h.Step, "rank %d", rank)
		assert.Equal(t, want.counted, h.Counted, "rank %d: its count, as it names no step", rank)
		assert.Equal(t, int64(300*time.Millisecond), h.TimeoutNanos, "rank %d", rank)
		assert.False(t, h.Stopped)
		assert.Greater(t, h.QuietNanos, h.TimeoutNanos, "rank %d", rank)
		assert.Less(t, h.QuietNanos, int64(30*time.Second), "rank %d: sane", rank)
		assert.InDelta(t, time.Now().UnixNano(), h.LastActivityUnixNanos, float64(time.Minute), "rank %d", rank)
	}
	// Progress comes once a second while the ranks step: their last steps
	// come after the first.
	last := j.find(func(r guard.Report) bool {
		return r.Event == guard.EventProgress && r.Progress[0].Steps == 5 && r.Progress[0].Step == 42 && r.Progress[1].Steps == 3
	})
	assert.Equal(t, int64(1), last.Generation)
	assert.Equal(t, int64(300*time.Millisecond), last.TimeoutNanos)
	require.Len(t, last.Progress, 2)
	p0 := last.Progress[0]
	assert.Equal(t, guard.RankProgress{Rank: 0, Steps: 5, Step: 42, IntervalNanos: p0.IntervalNanos, MaxIntervalNanos: p0.MaxIntervalNanos, Hung: p0.Hung,
		FirstStepUnixNanos: p0.FirstStepUnixNanos, LastStepUnixNanos: p0.LastStepUnixNanos, FirstNamed: 42, FirstNamedUnixNanos: p0.LastStepUnixNanos}, p0,
		"its one named step named with its last")
	assert.Positive(t, p0.FirstStepUnixNanos)
	assert.LessOrEqual(t, p0.FirstStepUnixNanos, p0.LastStepUnixNanos)
	assert.InDelta(t, time.Now().UnixNano(), p0.LastStepUnixNanos, float64(time.Minute), "on the wall clock")
	// Steps that all fall between two samples (a loaded machine) give no
	// interval: the median is 0 then, never negative.
	assert.GreaterOrEqual(t, p0.IntervalNanos, int64(0))
	assert.GreaterOrEqual(t, p0.MaxIntervalNanos, p0.IntervalNanos)
	assert.True(t, last.Progress[1].Counted, "rank 1 names no step: its count")

	j.stop(guard.Command{})
	_, count := of(guard.EventHung, j.seen)
	assert.Equal(t, map[int]int{0: 1, 1: 1}, count, "once per rank and generation")

	// As the ranks are reaped, how far those that stepped got, once, before
	// the run is clear.
	final := j.find(func(r guard.Report) bool { return r.Event == guard.EventProgress && r.Final })
	byRank := map[int]guard.RankProgress{}
	for _, p := range final.Progress {
		byRank[p.Rank] = p
	}
	require.Len(t, byRank, 2, "%+v", final.Progress)
	assert.InDelta(t, p0.LastStepUnixNanos, byRank[0].LastStepUnixNanos, float64(time.Millisecond), "the same step, read again")
	assert.Equal(t, int64(42), byRank[0].Step)
	assert.Equal(t, int64(3), byRank[1].Steps)
	assert.Zero(t, byRank[1].FirstNamed, "rank 1 named no step")

	// A rank that never steps is hung once its startup budget passed.
	w = &guard.Watch{TimeoutNanos: int64(300 * time.Millisecond), StartupNanos: int64(500 * time.Millisecond), Expect: true}
	pids = j.start(2, w, j.proc(2, "wait"))
	hung := j.find(func(r guard.Report) bool { return r.Event == guard.EventHung && r.Generation == 2 })
	assert.Equal(t, pids[0], hung.Pid)
	assert.Equal(t, 2, hung.Rank)
	assert.Zero(t, hung.Step)
	assert.False(t, hung.Counted, "no step at all")
	assert.Equal(t, int64(500*time.Millisecond), hung.TimeoutNanos, "the startup budget")
	assert.Greater(t, hung.QuietNanos, hung.TimeoutNanos)
	assert.Zero(t, hung.LastActivityUnixNanos, "rank 2 showed no sign of life")
	j.stop(guard.Command{})
}

// A process found stopped for more than half a second is hung, whether or not
// it has a page and whatever the timeouts: here a program that maps none,
// with quiet watching off; and a stand-in whose page was attached by a
// child that stopped itself. A process stopped by the debugger that traces
// it is not hung.
func TestAStoppedProcessIsHung(t *testing.T) {
	j := newHangJob(t)
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	off := &guard.Watch{TimeoutNanos: 0, StartupNanos: 0}
	pids := j.start(1, off, guard.Proc{Rank: 0, Path: sleep, Argv: []string{"sleep", "3600"}, Env: os.Environ()},
		j.proc(1, "trace", "wait"), j.proc(2, "stopchild", "wait"))
	j.printed("[rank 1] traced ")
	j.printed("[rank 2] child ")
	traced, _ := strconv.Atoi(strings.TrimPrefix(j.lineOf("[rank 1] traced "), "[rank 1] traced "))
	require.Equal(t, byte('t'), stateOf(traced), "the child of rank 1 is in a tracing stop")
	require.NoError(t, syscall.Kill(pids[0], syscall.SIGSTOP))

	j.until(func(guard.Report) bool {
		got, _ := of(guard.EventHung, j.seen)
		return got[0].Pid != 0 && got[2].Pid != 0
	})
	got, _ := of(guard.EventHung, j.seen)
	for _, rank := range []int{0, 2} {
		assert.True(t, got[rank].Stopped, "rank %d", rank)
		assert.Equal(t, pids[rank], got[rank].Pid, "rank %d: the rank's process, whichever of its tree stopped", rank)
		assert.Equal(t, int64(500*time.Millisecond), got[rank].TimeoutNanos, "the stopped limit")
		assert.Greater(t, got[rank].QuietNanos, int64(500*time.Millisecond))
	}
	// Rank 1's child was in its tracing stop before rank 0 stopped: it
	// would have been found first.
	j.stop(guard.Command{})
	_, count := of(guard.EventHung, j.seen)
	assert.Zero(t, count[1], "a traced process is not hung")
	assert.False(t, proctest.Alive(traced))
}

// A stop with stacks has every rank write its Python stack, a stopped one
// too, and then kills without a grace period.
func TestAStopWithStacksWritesThemAndKills(t *testing.T) {
	j := newHangJob(t)
	pids := j.start(1, fixed, j.proc(0, "forever", "20"), j.proc(1, "step", "1", "0", "wait"))
	j.printed("[rank 0] page fd=3 magic=ELPROG1 gen=1")
	j.printed("[rank 1] page fd=3 magic=ELPROG1 gen=1")
	require.NoError(t, syscall.Kill(pids[1], syscall.SIGSTOP))
	require.Eventually(t, func() bool { return stateOf(pids[1]) == 'T' }, 30*time.Second, time.Millisecond)

	ex, _ := of(guard.EventExit, j.stop(guard.Command{Stacks: true, GraceNanos: int64(time.Hour)}))
	for rank := range 2 {
		prefix := "[rank " + strconv.Itoa(rank) + "] "
		assert.Contains(t, j.out.String(), prefix+"Current thread", "rank %d wrote its stack", rank)
		assert.Contains(t, j.out.String(), prefix+"  File \""+j.script, "rank %d wrote its stack", rank)
		assert.NotContains(t, j.out.String(), prefix+"got term", "rank %d got no SIGTERM", rank)
		assert.Equal(t, int(syscall.SIGKILL), ex[rank].Signal, "rank %d", rank)
	}
}

// An in-place rank reported hung may only wait in a collective for a peer
// whose node is lost, so a stop for the hang asks it to leave first: one
// that leaves keeps its process, parked, and writes no stack; one that does
// not leave (it truly hangs) writes its stack and is killed.
func TestAnInPlaceRankReportedHungIsAskedToLeaveFirst(t *testing.T) {
	j := newHangJob(t)
	pids := j.start(1, fixed, j.proc(0, "inplace", "1", "step", "1", "0", "wait"),
		j.proc(1, "inplace", "1", "deaf", "step", "1", "0", "wait"))
	j.printed("[rank 0] registered ok")
	j.printed("[rank 1] registered ok")
	j.until(hungRank(0))
	j.find(hungRank(1))

	reps := j.stop(guard.Command{Stacks: true})
	parked, _ := of(guard.EventParked, reps)
	exits, _ := of(guard.EventExit, reps)
	require.Contains(t, parked, 0, "output:\n%s", j.out.String())
	assert.Equal(t, pids[0], parked[0].Pid)
	assert.True(t, proctest.Alive(pids[0]), "the rank that left keeps its process")
	assert.NotContains(t, j.out.String(), "[rank 0] Current thread", "it wrote no stack")
	assert.NotContains(t, exits, 0)

	assert.Contains(t, j.out.String(), "[rank 1] Current thread", "the rank that did not leave wrote its stack")
	require.Contains(t, exits, 1)
	assert.Equal(t, int(syscall.SIGKILL), exits[1].Signal)
}

// At a graceful stop, a rank that is blocked writes its stack and is
// killed at once; one that steps gets SIGTERM and its grace period.
func TestAGracefulStopKillsABlockedRankAtOnce(t *testing.T) {
	j := newHangJob(t)
	w := &guard.Watch{TimeoutNanos: int64(1200 * time.Millisecond), StartupNanos: 0}
	j.start(1, w, j.proc(0, "forever", "20"), j.proc(1, "step", "3", "20", "wait"))
	// Quiet for longer than a second: blocked.
	j.until(hungRank(1))

	ex, _ := of(guard.EventExit, j.stop(guard.Command{GraceNanos: int64(time.Hour)}))
	assert.Contains(t, j.out.String(), "[rank 1] Current thread", "the blocked rank wrote its stack")
	assert.NotContains(t, j.out.String(), "[rank 1] got term")
	assert.Equal(t, int(syscall.SIGKILL), ex[1].Signal)
	assert.Contains(t, j.out.String(), "[rank 0] got term")
	assert.NotContains(t, j.out.String(), "[rank 0] Current thread")
	assert.Equal(t, 0, ex[0].Code, "the stepping rank exited on SIGTERM")
}

// A warm interpreter gets its page as descriptor 5, named in its go
// message, which its bootstrap attaches (the trainers' modules on its
// path), written the generation it runs.
func TestAWarmStartGetsItsPage(t *testing.T) {
	j := newHangJob(t)
	modules := t.TempDir()
	require.NoError(t, memckpt.WriteModule(modules))
	p := j.proc(0, "step", "3", "20", "wait")
	p.Env = append(p.Env, "PYTHONPATH="+modules)
	j.send(guard.Command{Op: guard.OpWarm, Warm: []guard.Warm{{Slot: 0, Path: p.Path, Argv: p.Argv, Dir: p.Dir, Env: append(os.Environ(), "PYTHONPATH="+modules),
		Prefix: "[warm 0] ", Preload: []string{"json"}}}})
	j.until(func(r guard.Report) bool { return r.Event == guard.EventWarmReady })

	seq := j.send(guard.Command{Op: guard.OpStart, Lease: 1, Generation: 2, Procs: []guard.Proc{p}, Watch: fixed})
	reps := j.until(func(r guard.Report) bool { return r.Seq == seq && r.Event == guard.EventStarted })
	assert.Equal(t, 1, reps[len(reps)-1].Warm)
	j.printed("[rank 0] page attached magic=ELPROG1 gen=2")
	reps = j.until(func(r guard.Report) bool { return r.Event == guard.EventProgress && r.Progress[0].Steps == 3 })
	assert.Equal(t, int64(2), reps[len(reps)-1].Generation)
}

// Each start's processes have pages of their own: what the processes of
// an earlier generation wrote is not read for the next one's.
func TestAnOldGenerationsPageIsNotRead(t *testing.T) {
	j := newHangJob(t)
	learned := &guard.Watch{TimeoutNanos: guard.WatchLearned, StartupNanos: 0}
	j.start(1, learned, j.proc(0, "step", "50", "1", "wait"))
	j.until(func(r guard.Report) bool { return r.Event == guard.EventProgress && r.Progress[0].Steps == 50 })
	j.stop(guard.Command{})

	j.start(2, learned, j.proc(0, "step", "2", "20", "wait"))
	j.printed("[rank 0] page fd=3 magic=ELPROG1 gen=2")
	reps := j.until(func(r guard.Report) bool {
		return r.Event == guard.EventProgress && r.Generation == 2 && r.Progress[0].Steps == 2
	})
	for _, r := range reps {
		if r.Event == guard.EventProgress && r.Generation == 2 {
			assert.LessOrEqual(t, r.Progress[0].Steps, int64(2))
		}
	}
	j.stop(guard.Command{})
	_, count := of(guard.EventHung, j.seen)
	assert.Empty(t, count)
}

// A rank that never steps is not watched without a startup budget, nor is
// one inside a declared quiet phase: by the time a rank that stepped later
// is hung, they would have been.
func TestNoHangWhereNoneIsDue(t *testing.T) {
	j := newHangJob(t)
	mark := filepath.Join(j.dir, "quiet")
	j.start(1, fixed, j.proc(0, "until", mark, "step", "1", "0", "wait"), j.proc(1, "wait"),
		j.proc(2, "step", "1", "0", "quiet", "3600", "touch", mark, "wait"))
	j.until(hungRank(0))
	j.stop(guard.Command{})
	_, count := of(guard.EventHung, j.seen)
	assert.Equal(t, map[int]int{0: 1}, count)
}
