package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/pngtest"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/internal/testkit/pythons"
	"github.com/elastictraining/coordinator/internal/timeline"
	"github.com/elastictraining/coordinator/membership"
)

// The hang tests run testdata/hangtrainer.py, a plain two-rank PyTorch DDP
// job, under `coordinator run`, and make one of its ranks hang: stopped,
// blocked, or pausing. What they wait on is the trainers' output and the
// job's status and events, never time.

// hangRun is a `coordinator run --np 2` of testdata/hangtrainer.py.
type hangRun struct {
	*localRun
	job string
	// dir is the trainer's HANG_DIR.
	dir string
}

func startHangRun(t *testing.T, job string, args []string, env ...string) *hangRun {
	t.Helper()
	requireTorch(t)
	return startHangRunOn(t, python, job, args, env...)
}

// startHangRunOn is startHangRun with the interpreter py.
func startHangRunOn(t *testing.T, py, job string, args []string, env ...string) *hangRun {
	t.Helper()
	dir := t.TempDir()
	r := startRun(t, append([]string{"--np", "2", "--job", job}, args...), []string{py, "testdata/hangtrainer.py"},
		append(env, "HANG_DIR="+dir)...)
	return &hangRun{localRun: r, job: job, dir: dir}
}

// said waits until a rank of a generation printed the line "hangtest
// gen=G rank=R " followed by what matches pattern, and returns pattern's
// submatches.
func (h *hangRun) said(gen, rank int, pattern string) []string {
	h.t.Helper()
	re := regexp.MustCompile(`(?m)^\[rank ` + strconv.Itoa(rank) + `\] hangtest gen=` + strconv.Itoa(gen) +
		` rank=` + strconv.Itoa(rank) + ` ` + pattern + `$`)
	var m []string
	require.Eventually(h.t, func() bool {
		m = re.FindStringSubmatch(h.out.String())
		return m != nil
	}, time.Minute, 10*time.Millisecond, "rank %d never said %q in generation %d:\n%s", rank, pattern, gen, h.out)
	return m
}

// pid waits for a rank's pid in a generation.
func (h *hangRun) pid(gen, rank int) int {
	h.t.Helper()
	pid, err := strconv.Atoi(h.said(gen, rank, `pid=(\d+)`)[1])
	require.NoError(h.t, err)
	return pid
}

// finish has the ranks leave their loop together, at their next step.
func (h *hangRun) finish() {
	h.t.Helper()
	require.NoError(h.t, os.WriteFile(filepath.Join(h.dir, "finish"), nil, 0o644))
}

// hangStatus is what the tests read of `status -o json`, as a script does.
type hangStatus struct {
	Phase        string `json:"phase"`
	Generation   int64  `json:"generation"`
	Restarts     int    `json:"restarts"`
	HangRestarts int    `json:"hangRestarts"`
	Slowest      *struct {
		Node               string  `json:"node"`
		Rank               int     `json:"rank"`
		Step               int64   `json:"step"`
		StepSeconds        float64 `json:"stepSeconds"`
		HangTimeoutSeconds float64 `json:"hangTimeoutSeconds"`
	} `json:"slowest"`
	Nodes []struct {
		Node string `json:"node"`
		Rank *int   `json:"rank"`
		PIDs []int  `json:"pids"`
	} `json:"nodes"`
	Goodput *struct {
		WallSeconds float64 `json:"wallSeconds"`
		LostSeconds struct {
			Restarting float64 `json:"restarting"`
			Hung       float64 `json:"hung"`
		} `json:"lostSeconds"`
	} `json:"goodput"`
}

// plotShowsTheHang waits for the job's account to have the hang, then
// draws its timeline with `events --plot` and reads the picture: the
// lane of what the job did is red (hung) for about the share of the job's
// time the account counts hung, and has training after it, up to now.
func (h *hangRun) plotShowsTheHang() {
	h.t.Helper()
	h.statusWhen("accounted the hang", func(st hangStatus) bool {
		return st.Goodput != nil && st.Goodput.LostSeconds.Hung > 0
	})
	file := filepath.Join(h.t.TempDir(), "timeline.png")
	code, _, stderr := cli(h.t, nil, "events", "--etcd-endpoints", h.endpoint, "--job", h.job, "--plot", file)
	require.Equal(h.t, 0, code, stderr)
	st := h.statusWhen("has an account", func(st hangStatus) bool { return st.Goodput != nil })
	img, err := pngtest.Decode(file)
	require.NoError(h.t, err)
	widths := pngtest.BandWidths(pngtest.Bottom(img, 1.0/3), timeline.CauseColors)
	total := 0
	for _, w := range widths {
		total += w
	}
	require.Positive(h.t, total, "a lane drawn")
	hungShare := st.Goodput.LostSeconds.Hung / st.Goodput.WallSeconds
	ok := assert.InDelta(h.t, hungShare, float64(widths[membership.CauseHung])/float64(total), 0.03,
		"hung drawn as the account has it: %v of %d pixels; %.3fs hung of %.3fs", widths, total, st.Goodput.LostSeconds.Hung, st.Goodput.WallSeconds)
	if !assert.Positive(h.t, widths[membership.CauseTraining], "training drawn") || !ok {
		_, events, _ := cli(h.t, nil, "events", "--etcd-endpoints", h.endpoint, "--job", h.job, "-o", "json")
		_, status, _ := cli(h.t, nil, "status", "--etcd-endpoints", h.endpoint, "--job", h.job, "-o", "json")
		h.t.Logf("the events the plot was drawn from:\n%s\nthe status:\n%s", events, status)
	}
}

// statusOf runs `coordinator status` with args and returns its output.
func (h *hangRun) statusOf(args ...string) string {
	h.t.Helper()
	code, stdout, stderr := cli(h.t, nil, append([]string{"status", "--etcd-endpoints", h.endpoint, "--job", h.job}, args...)...)
	require.Equal(h.t, 0, code, stderr)
	return stdout
}

// statusWhen waits until `status -o json` satisfies ok, and returns it.
func (h *hangRun) statusWhen(what string, ok func(hangStatus) bool) hangStatus {
	h.t.Helper()
	var st hangStatus
	var last string
	require.Eventually(h.t, func() bool {
		code, stdout, stderr := cli(h.t, nil, "status", "--etcd-endpoints", h.endpoint, "--job", h.job, "-o", "json")
		last, st = stdout+stderr, hangStatus{}
		return code == 0 && json.Unmarshal([]byte(stdout), &st) == nil && ok(st)
	}, time.Minute, 20*time.Millisecond, "the job never %s; last status %s", what, &last)
	return st
}

// running is the condition "generation gen runs".
func running(gen int64) func(hangStatus) bool {
	return func(st hangStatus) bool {
		return st.Phase == string(membership.JobRunning) && st.Generation == gen
	}
}

// A trainer stopped with SIGSTOP (a Ctrl-Z, a `kill -STOP`) makes no
// progress and answers nothing, and its peers wait for it in their next
// allreduce. Its guard finds it stopped, the job restarts its generation
// once, charged to the hang budget, and the next generation trains. The
// script imports nothing of ours: the steps counted are its optimizer's,
// in interpreters that imported torch before the job started.
func TestAStoppedTrainerRestartsItsGeneration(t *testing.T) {
	t.Parallel()
	for _, py := range pythons.Torches(t) {
		t.Run(py.Name, func(t *testing.T) {
			t.Parallel()
			aStoppedTrainerRestartsItsGeneration(t, py.Path)
		})
	}
}

func aStoppedTrainerRestartsItsGeneration(t *testing.T, py string) {
	h := startHangRunOn(t, py, "stopped", []string{"--preload", "torch"})
	victim := h.pid(1, 1)
	h.said(1, 1, `step=3`)
	st := h.statusWhen("ran generation 1", running(1))
	var listed []int
	for _, n := range st.Nodes {
		if n.Rank != nil && *n.Rank == 1 {
			listed = n.PIDs
		}
	}
	require.Equal(t, []int{victim}, listed, "status gives rank 1's pid")

	freezePid(t, victim)
	for rank := range 2 {
		h.said(2, rank, `step=3`)
	}
	assert.False(t, proctest.Alive(victim), "the stopped trainer was killed")
	st = h.statusWhen("ran generation 2", running(2))
	assert.Equal(t, 1, st.HangRestarts, "the restart is charged to the hang budget")
	assert.Equal(t, 0, st.Restarts, "and not to the restart budget")
	// The job's account has the time from the ranks' last step to the
	// stop as hung, the rest of the restart as restarting.
	h.statusWhen("accounted the hang", func(st hangStatus) bool {
		return st.Goodput != nil && st.Goodput.LostSeconds.Hung > 0 && st.Goodput.LostSeconds.Restarting > 0
	})

	h.finish()
	require.Equal(t, 0, h.wait())
	out := h.out.String()
	assert.Regexp(t, `\[rank 1\] rank 1 was stopped \(SIGSTOP, not a debugger\) for \S+ after its \d+(?:st|nd|rd|th) step in this process \(its own count: it names no step of the job\); stacks in its log; reported to the coordinator`, out)
	assert.Regexp(t, `coordinator run: generation 2 running: 2 nodes, world size 2 \(rank 1 on node stopped-\d was stopped \(SIGSTOP, not a debugger\) for \S+ after its \d+(?:st|nd|rd|th) step in this process \(its own count: it names no step of the job\); stacks in its log\)`, out)
	assert.Contains(t, out, "job stopped succeeded")
}

// A rank that stops itself (SIGSTOP) at the top of its step 4, its peer
// waiting for it in that step's allreduce: the guard continues it to write
// its stack and halts its page first, so it parks at its backward's start,
// and neither rank takes step 4 in generation 1, cold or warm.
func TestNoRankStepsOnceAStoppedRankIsFound(t *testing.T) {
	t.Parallel()
	for _, warm := range []bool{false, true} {
		t.Run(map[bool]string{false: "cold", true: "warm"}[warm], func(t *testing.T) {
			t.Parallel()
			var args []string
			if warm {
				args = []string{"--preload", "torch"}
			}
			h := startHangRun(t, "halted", args, "HANG_STOP_AFTER=3@1")
			h.said(1, 1, `stops after step 3`)
			for rank := range 2 {
				h.said(2, rank, `step=1`)
			}
			h.finish()
			require.Equal(t, 0, h.wait())
			out := h.out.String()
			for rank := range 2 {
				assert.NotContains(t, out, "hangtest gen=1 rank="+strconv.Itoa(rank)+" step=4\n", "rank %d stepped on in generation 1", rank)
			}
		})
	}
}

// A rank blocked for good (here in a select that nothing answers, standing
// for a read from a filesystem gone away) stalls its peer in backward's
// allreduce. With a hang timeout of 1s the job restarts its generation;
// the RankHung event names the rank that hung and the step after which it
// did; each rank's log has the Python stacks of the moment, the blocked
// rank's in the function it blocked in, its peer's in backward.
//
// The blocked rank notes a SIGTERM in a file, whichever of its threads
// the signal is delivered to, and goes on blocking, as a rank stuck in C
// code would: it can end only by SIGKILL. Once generation 2 runs it is
// gone, and it never noted a SIGTERM: it was killed without one, so no
// grace period (SIGTERM, then 60s, then SIGKILL) was waited.
func TestADeadlockedRankIsFoundAndWhereItHungIsShown(t *testing.T) {
	t.Parallel()
	for _, py := range pythons.Torches(t) {
		t.Run(py.Name, func(t *testing.T) {
			t.Parallel()
			aDeadlockedRankIsFoundAndWhereItHungIsShown(t, py.Path)
		})
	}
}

func aDeadlockedRankIsFoundAndWhereItHungIsShown(t *testing.T, py string) {
	logs := t.TempDir()
	h := startHangRunOn(t, py, "deadlock", []string{"--hang-timeout", "1s", "--grace-period", "60s", "--log-dir", logs},
		"HANG_BLOCK_AFTER=3@1")
	blocked := h.pid(1, 1)
	h.said(1, 1, `blocks after step 3`)
	for rank := range 2 {
		h.said(2, rank, `step=2`)
	}
	assert.False(t, proctest.Alive(blocked), "the blocked rank is gone")
	assert.NoFileExists(t, filepath.Join(h.dir, "sigterm-1-1"), "the blocked rank was killed without a SIGTERM")

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	events, err := h.client.Events(ctx, h.job)
	require.NoError(t, err)
	var hung []membership.Event
	for _, e := range events {
		if e.Type == "RankHung" {
			hung = append(hung, e)
		}
	}
	require.Len(t, hung, 1, "one RankHung event: %+v", events)
	assert.Equal(t, int64(1), hung[0].Generation)
	assert.Regexp(t, `^rank 1 on node deadlock-\d made no progress for \S+ \(hang timeout 1s\) after its 3rd step in this process \(its own count: it names no step of the job\); stacks in its log$`, hung[0].Message)
	st := h.statusWhen("ran generation 2", running(2))
	assert.Equal(t, 1, st.HangRestarts)
	h.plotShowsTheHang()

	h.finish()
	require.Equal(t, 0, h.wait())
	logOf := func(rank int) string {
		files, err := filepath.Glob(filepath.Join(logs, "deadlock-*", "rank-"+strconv.Itoa(rank)+".log"))
		require.NoError(t, err)
		require.Len(t, files, 1, "rank %d's log", rank)
		data, err := os.ReadFile(files[0])
		require.NoError(t, err)
		return string(data)
	}
	blockedLog, peerLog := logOf(1), logOf(0)
	assert.Contains(t, blockedLog, "most recent call first")
	assert.Regexp(t, `File "\S*hangtrainer.py", line \d+ in blocked_in_the_data_loader\n`, blockedLog, "rank 1's stack is where it blocked")
	assert.Contains(t, blockedLog, "==== killed by signal 9 (killed) ====")
	assert.Contains(t, peerLog, "most recent call first")
	assert.Regexp(t, `File "\S*torch/autograd/__init__.py", line \d+ in backward\n`, peerLog, "rank 0 waited in backward's allreduce")
}

// A rank declares a pause longer than the hang timeout with
// elastic.quiet: every rank sleeps 2s inside `with elastic.quiet(3)`,
// with a hang timeout of 1s, and the generation goes on.
func TestAPauseDeclaredWithQuietIsNoHang(t *testing.T) {
	t.Parallel()
	h := startHangRun(t, "quiet", []string{"--hang-timeout", "1s"}, "HANG_PAUSE_AFTER=3", "HANG_PAUSE=2", "HANG_QUIET=3")
	for rank := range 2 {
		h.said(1, rank, `resumes`)
		h.said(1, rank, `step=5`)
	}
	st := h.statusWhen("ran generation 1", running(1))
	assert.Equal(t, 0, st.HangRestarts)

	h.finish()
	require.Equal(t, 0, h.wait())
	out := h.out.String()
	assert.NotContains(t, out, "reported to the coordinator")
	assert.NotContains(t, out, "hangtest gen=2")
}

// Rank 0 alone evaluates for 3s inside `with elastic.quiet(5)`, with a
// hang timeout of 1s: rank 1, waiting for it in its next allreduce, is
// found quiet and reported, but the coordinator waits for rank 0's
// declared phase; once rank 0 is back, rank 1 steps again, its report is
// withdrawn, and the generation goes on.
func TestAPeersDeclaredQuietPhaseIsNoHangOfTheRanksWaitingForIt(t *testing.T) {
	t.Parallel()
	h := startHangRun(t, "peerquiet", []string{"--hang-timeout", "1s"}, "HANG_PAUSE_AFTER=3", "HANG_PAUSE=3", "HANG_QUIET=5", "HANG_PAUSE_RANKS=0")
	h.said(1, 0, `resumes`)
	for rank := range 2 {
		h.said(1, rank, `step=6`)
	}
	st := h.statusWhen("ran generation 1", running(1))
	assert.Equal(t, 0, st.HangRestarts)

	h.finish()
	require.Equal(t, 0, h.wait())
	out := h.out.String()
	assert.Contains(t, out, "rank 1 steps again: its hang report is withdrawn", "rank 1 was quiet past its timeout, and reported")
	assert.NotContains(t, out, "hangtest gen=2")
}

// Every rank pauses undeclared for 6s (an evaluation) in every
// generation, longer than the learned timeout of a job of short steps
// (5s). The first pause costs a restart; after it the job's least timeout
// is ten times the one that fired, and the same pause passes.
func TestARepeatedPauseCostsOneRestartAtMost(t *testing.T) {
	t.Parallel()
	h := startHangRun(t, "pause", nil, "HANG_PAUSE_AFTER=3", "HANG_PAUSE=6", "HANG_STEPS=5")
	for rank := range 2 {
		h.said(2, rank, `pauses after step 3`)
	}
	st := h.statusWhen("ran generation 2", running(2))
	assert.Equal(t, 1, st.HangRestarts, "the first pause cost a restart")

	require.Equal(t, 0, h.wait())
	out := h.out.String()
	for rank := range 2 {
		h.said(2, rank, `done`)
	}
	assert.NotContains(t, out, "hangtest gen=3", "the second pause cost none")
	assert.Regexp(t, `coordinator run: generation 2 running: 2 nodes, world size 2 \(rank \d on node pause-\d made no progress for \S+ \(hang timeout 5s\) after its 3rd step in this process \(its own count: it names no step of the job\); stacks in its log\)`, out)
}

// --hang-timeout 0 turns the watch of quiet ranks off: rank 1 blocks for
// 3s, three times a 1s timeout, and the generation goes on.
func TestHangTimeoutZeroWatchesNothing(t *testing.T) {
	t.Parallel()
	h := startHangRun(t, "unwatched", []string{"--hang-timeout", "0"}, "HANG_BLOCK_AFTER=3", "HANG_BLOCK_SECONDS=3", "HANG_STEPS=6")
	require.Equal(t, 0, h.wait())
	h.said(1, 1, `unblocks`)
	for rank := range 2 {
		h.said(1, rank, `done`)
	}
	out := h.out.String()
	assert.NotContains(t, out, "made no progress")
	assert.NotContains(t, out, "hangtest gen=2")
}

// A job whose rank hangs every generation spends its hang budget
// (--max-hang-restarts), then fails saying so.
func TestAJobThatHangsEveryGenerationSpendsItsHangBudget(t *testing.T) {
	t.Parallel()
	h := startHangRun(t, "budget", []string{"--max-hang-restarts", "1"}, "HANG_STOP_AFTER=2")
	assert.Equal(t, 1, h.wait(), "the job fails")
	h.said(2, 1, `stops after step 2`)
	out := h.out.String()
	assert.NotContains(t, out, "hangtest gen=3")
	assert.Regexp(t, `coordinator run: job budget failed with exit code 1: rank 1 on node budget-\d was stopped \(SIGSTOP, not a debugger\) for \S+ after its 2nd step in this process \(its own count: it names no step of the job\); stacks in its log and the hang budget of 1 is spent`, out)
}

// `status` names the job's slowest rank while it trains, with its step
// time and the hang timeout in force (learned: at least 5s).
func TestStatusNamesTheSlowestRank(t *testing.T) {
	t.Parallel()
	h := startHangRun(t, "slow", nil)
	h.said(1, 0, `step=3`)
	st := h.statusWhen("named its slowest rank", func(st hangStatus) bool { return st.Slowest != nil })
	assert.Contains(t, []int{0, 1}, st.Slowest.Rank)
	assert.Regexp(t, `^slow-\d$`, st.Slowest.Node)
	assert.Positive(t, st.Slowest.Step)
	assert.Positive(t, st.Slowest.StepSeconds)
	assert.GreaterOrEqual(t, st.Slowest.HangTimeoutSeconds, 5.0, "the learned timeout, at least 5s")
	assert.Regexp(t, `(?m)^Slowest rank: rank [01] on node slow-\d, [1-9][\d.]*m?s a step \(median of its recent steps\), at (?:step \d+|its \d+(?:st|nd|rd|th) step in this process \(its own count: it names no step of the job\)); hang timeout [1-9]\S*s$`, h.statusOf())

	h.finish()
	require.Equal(t, 0, h.wait())
}
