package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/internal/testkit/pythons"
	"github.com/elastictraining/coordinator/membership"
)

// inplaceStart is the line testdata/inplace_trainer.py prints as each
// generation's train(gen) begins.
var inplaceStart = regexp.MustCompile(`(?m)^\[rank (\d+)\] generation (\d+): rank (\d+) of (\d+) from step (\d+), pid (\d+), (new|in place|started spare), digest (\w+)$`)

// inplaceStep is the line it prints after each step.
var inplaceStep = regexp.MustCompile(`(?m)^\[rank (\d+)\] step (\d+) loss \S+ digest (\w+)$`)

// generationStart is one rank's start of train(gen).
type generationStart struct {
	rank, step, pid int
	inPlace         bool
	digest          string
}

// generationStarts waits until generation gen's world ranks have begun
// training, and returns them by rank.
func generationStarts(t *testing.T, r *localRun, gen, world int) map[int]generationStart {
	t.Helper()
	var got map[int]generationStart
	require.Eventually(t, func() bool {
		got = map[int]generationStart{}
		for _, m := range inplaceStart.FindAllStringSubmatch(r.out.String(), -1) {
			if g, _ := strconv.Atoi(m[2]); g != gen {
				continue
			}
			rank, _ := strconv.Atoi(m[3])
			step, _ := strconv.Atoi(m[5])
			pid, _ := strconv.Atoi(m[6])
			got[rank] = generationStart{rank: rank, step: step, pid: pid, inPlace: m[7] == "in place", digest: m[8]}
		}
		return len(got) == world
	}, 90*time.Second, 20*time.Millisecond, "generation %d never trained on %d ranks:\n%s", gen, world, r.out)
	return got
}

// trained waits until both ranks have trained step n.
func trained(t *testing.T, r *localRun, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		out := r.out.String()
		return strings.Contains(out, fmt.Sprintf("[rank 0] step %d ", n)) && strings.Contains(out, fmt.Sprintf("[rank 1] step %d ", n))
	}, 90*time.Second, 20*time.Millisecond, "step %d never trained:\n%s", n, r.out)
}

// A trainer written with elastic.run keeps its process across generations:
// when its peer is killed, and when its peer stops (a hang), the survivor
// leaves its process group, is parked, and trains in the next generation
// under the same pid, from the step its state is at, with the state its new
// peer got from it; at every step every rank holds the same parameters and
// optimizer state.
func TestSurvivorsTrainOnInPlace(t *testing.T) {
	t.Parallel()
	for _, py := range pythons.Torches(t) {
		t.Run(py.Name, func(t *testing.T) {
			t.Parallel()
			survivorsTrainOnInPlace(t, py.Path)
		})
	}
}

func survivorsTrainOnInPlace(t *testing.T, python string) {
	r := startRun(t, []string{"--np", "2", "--job", "inplace"},
		[]string{python, filepath.Join(repoRoot, "testdata", "inplace_trainer.py")}, "STEPS=300", "STEP_SECONDS=0.03")

	first := generationStarts(t, r, 1, 2)
	survivor := first[0].pid
	trained(t, r, 10)
	require.NoError(t, syscall.Kill(first[1].pid, syscall.SIGKILL), "kill rank 1")

	second := generationStarts(t, r, 2, 2)
	assert.Equal(t, survivor, second[0].pid, "rank 0 kept its process")
	assert.True(t, second[0].inPlace, "rank 0 trained on in place")
	assert.False(t, second[1].inPlace, "rank 1 started anew")
	assert.Positive(t, second[0].step, "the job went on from where it was")
	assert.Equal(t, second[0].step, second[1].step, "both ranks agreed on the step")
	assert.Equal(t, second[0].digest, second[1].digest, "the new rank got the survivor's state")
	// The survivor's page is its new generation's: the leader does not take
	// its old steps for the new generation's and count them redone.
	trained(t, r, second[0].step+20)
	st := r.status("inplace", "accounted generation 2", func(s membership.Status) bool { return s.Generation >= 2 && s.Goodput != nil })
	assert.Less(t, st.Goodput.Total.Redone, 1.0, "no step was trained again: %+v", st.Goodput.Total)

	// A stopped peer: found hung, killed alone; the survivor leaves the
	// collective it waits in and trains on in place.
	trained(t, r, second[0].step+10)
	require.NoError(t, syscall.Kill(second[1].pid, syscall.SIGSTOP), "stop rank 1")
	third := generationStarts(t, r, 3, 2)
	assert.Equal(t, survivor, third[0].pid, "rank 0 kept its process through a hang too")
	assert.True(t, third[0].inPlace)
	assert.Equal(t, third[0].digest, third[1].digest)
	assert.GreaterOrEqual(t, third[0].step, second[0].step)

	require.Equal(t, 0, r.wait(), "the job succeeded:\n%s", r.out)
	// Every step's state, the same on both ranks (a rank's later line of
	// a step wins: a step may be trained again after a restart).
	digests := stepDigests(r)
	require.Len(t, digests, 300, "every step was trained")
	for step, byRank := range digests {
		assert.Equal(t, byRank[0], byRank[1], "step %d: both ranks hold the same state", step)
	}
}

// Rank 0 serves the generation's store. Stopped (SIGSTOP), it is found
// hung and killed; its peer, asked to leave while its step has not yet
// lasted long enough to count as blocked, proposes the ranks' common stop
// in that store, which never answers: the peer gives up, cuts its
// connections, and trains on in place. Before, the proposal waited for
// ever, and the peer was killed at the stop's end.
func TestThePeerOfAStoppedRank0TrainsOnInPlace(t *testing.T) {
	t.Parallel()
	requireTorch(t)
	r := startRun(t, []string{"--np", "2", "--job", "stopped0"},
		[]string{python, filepath.Join(repoRoot, "testdata", "inplace_trainer.py")}, "STEPS=60", "STEP_SECONDS=0.3")
	first := generationStarts(t, r, 1, 2)
	trained(t, r, 5)
	require.NoError(t, syscall.Kill(first[0].pid, syscall.SIGSTOP), "stop rank 0, the store's host")

	second := generationStarts(t, r, 2, 2)
	kept := false
	for _, g := range second {
		if g.pid == first[1].pid {
			kept = g.inPlace
		}
	}
	assert.True(t, kept, "rank 1's process trained on in place: %+v", second)
	require.Equal(t, 0, r.wait(), "the job succeeded:\n%s", r.out)
}

// Outside a sidecar, a script written with elastic.run runs its loop once,
// as a plain script, in a world of one.
func TestAnInPlaceTrainerRunsOnItsOwn(t *testing.T) {
	t.Parallel()
	requireTorch(t)
	dir := t.TempDir()
	out, err := exec.Command(binary, "python-module", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	cmd := exec.Command(python, filepath.Join(repoRoot, "testdata", "inplace_trainer.py"))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "STEPS=3", "STEP_SECONDS=0")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "generation 0: rank 0 of 1 from step 0")
	assert.Contains(t, string(out), fmt.Sprintf("step %d loss", 2))
}

// spareStarted matches the in-place trainer's start-up line as a started
// spare prints it.
var spareStarted = regexp.MustCompile(`(?m)^\[spare \d+\] started pid (\d+)$`)

// With --in-place, the spare node runs the trainer's start-up ahead and
// waits in elastic.run: a killed rank's replacement is that process, which
// paid its start-up before the fault, while the survivor trains on in
// place; the node whose trainer died starts the next spare at once.
func TestAKilledRanksReplacementIsAStartedSpare(t *testing.T) {
	t.Parallel()
	requireTorch(t)
	r := startRun(t, []string{"--np", "2", "--spares", "1", "--in-place", "--job", "started"},
		[]string{python, filepath.Join(repoRoot, "testdata", "inplace_trainer.py")}, "STEPS=300", "STEP_SECONDS=0.03", "STARTUP_SECONDS=2")

	first := generationStarts(t, r, 1, 2)
	trained(t, r, 10)
	var spare int
	require.Eventually(t, func() bool {
		m := spareStarted.FindStringSubmatch(r.out.String())
		if m != nil {
			spare, _ = strconv.Atoi(m[1])
		}
		return m != nil
	}, 60*time.Second, 20*time.Millisecond, "the spare never started its trainer:\n%s", r.out)
	assert.NotContains(t, []int{first[0].pid, first[1].pid}, spare)

	require.NoError(t, syscall.Kill(first[1].pid, syscall.SIGKILL), "kill rank 1")
	second := generationStarts(t, r, 2, 2)
	assert.Equal(t, first[0].pid, second[0].pid, "rank 0 kept its process")
	assert.True(t, second[0].inPlace)
	assert.Equal(t, spare, second[1].pid, "rank 1 is the started spare, whose start-up was done before the kill")
	assert.Equal(t, second[0].digest, second[1].digest, "the spare got the survivor's state")
	// The user reads how each rank began the generation, in the events
	// and in status.
	var events string
	require.Eventually(t, func() bool {
		_, events, _ = cli(t, nil, "events", "--etcd-endpoints", r.endpoint, "--job", "started")
		return strings.Contains(events, "GenerationRunning")
	}, 30*time.Second, 100*time.Millisecond)
	assert.Regexp(t, `(?m)^.*\b2\b.*GenerationRunning.*in place: rank 0; started spare: rank 1`, events)
	assert.Regexp(t, `(?m)^.*\b1\b.*GenerationRunning.*started spare(, still starting)?: ranks 0, 1`, events, "the first generation's ranks were started spares too")
	require.Eventually(t, func() bool {
		return len(spareStarted.FindAllStringSubmatch(r.out.String(), -1)) >= 2
	}, 60*time.Second, 20*time.Millisecond, "the node whose trainer died started no new spare:\n%s", r.out)
	code, stdout, stderr := cli(t, nil, "status", "--etcd-endpoints", r.endpoint, "--job", "started")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "BEGAN")
	assert.Regexp(t, `(?m)\bin place\b`, stdout)
	assert.Contains(t, stdout, "Spares: 1 of 1 started", "the new spare's start-up is done:\n%s", stdout)
	assert.Regexp(t, `spare \(started\)`, stdout)
	require.Equal(t, 0, r.wait(), "the job succeeded:\n%s", r.out)
}

// A node frozen whole (its sidecar, guard and trainer stopped, as a paused
// container): no connection reset reaches the survivor, blocked in gloo
// on the frozen rank. Once the frozen node's lease expires the survivor
// leaves that collective at once (not at gloo's 30-minute timeout) and
// trains on in place with the started spare; thawed, the frozen trainer is
// fenced and never trains again.
func TestAFrozenNodesSurvivorTrainsOnInPlace(t *testing.T) {
	t.Parallel()
	requireTorch(t)
	r := startRun(t, []string{"--np", "2", "--spares", "1", "--in-place", "--job", "frozen"},
		[]string{python, filepath.Join(repoRoot, "testdata", "inplace_trainer.py")}, "STEPS=400", "STEP_SECONDS=0.03", "STARTUP_SECONDS=1")
	first := generationStarts(t, r, 1, 2)
	trained(t, r, 10)
	require.Eventually(t, func() bool { return spareStarted.MatchString(r.out.String()) },
		60*time.Second, 20*time.Millisecond, "the spare never started its trainer:\n%s", r.out)

	guardPid, ok := guard.ParentOf(first[1].pid)
	require.True(t, ok)
	sidecarPid, ok := guard.ParentOf(guardPid)
	require.True(t, ok)
	order := freezeTree(t, sidecarPid)
	frozenAt := time.Now()

	second := generationStarts(t, r, 2, 2)
	t.Logf("generation 2 trained %s after the freeze", time.Since(frozenAt).Round(time.Millisecond))
	assert.Equal(t, first[0].pid, second[0].pid, "rank 0 kept its process")
	assert.True(t, second[0].inPlace)
	assert.NotEqual(t, first[1].pid, second[1].pid)
	assert.Equal(t, second[0].digest, second[1].digest)

	proctest.Thaw(order)
	require.Eventually(t, func() bool { return !proctest.Alive(first[1].pid) }, 30*time.Second, 20*time.Millisecond,
		"the thawed node's trainer was fenced")
	require.Equal(t, 0, r.wait(), "the job succeeded:\n%s", r.out)
	for step, byRank := range stepDigests(r) {
		assert.Equal(t, byRank[0], byRank[1], "step %d: both ranks hold the same state", step)
	}
}

// stepDigests is each step's digest by rank; a rank's later line of a step
// wins.
func stepDigests(r *localRun) map[int]map[int]string {
	digests := map[int]map[int]string{}
	for _, m := range inplaceStep.FindAllStringSubmatch(r.out.String(), -1) {
		rank, _ := strconv.Atoi(m[1])
		step, _ := strconv.Atoi(m[2])
		if digests[step] == nil {
			digests[step] = map[int]string{}
		}
		digests[step][rank] = m[3]
	}
	return digests
}

// With np 1:2 and no spare, a killed rank's node stands by while its
// trainer starts again: the survivor trains on alone, in place, and the
// job grows back to 2 once that trainer is ready, the survivor in place
// again.
func TestASurvivorTrainsAloneUntilTheReplacementHasStarted(t *testing.T) {
	t.Parallel()
	requireTorch(t)
	r := startRun(t, []string{"--np", "1:2", "--in-place", "--job", "alone"},
		[]string{python, filepath.Join(repoRoot, "testdata", "inplace_trainer.py")}, "STEPS=500", "STEP_SECONDS=0.03", "STARTUP_SECONDS=3")
	first := generationStarts(t, r, 1, 2)
	trained(t, r, 10)
	require.NoError(t, syscall.Kill(first[1].pid, syscall.SIGKILL), "kill rank 1")

	alone := generationStarts(t, r, 2, 1)
	assert.Equal(t, first[0].pid, alone[0].pid, "the survivor trains on alone, in place")
	assert.True(t, alone[0].inPlace)

	both := generationStarts(t, r, 3, 2)
	assert.Equal(t, first[0].pid, both[0].pid, "the survivor kept its process as the job grew")
	assert.True(t, both[1].inPlace == false && both[1].pid != first[1].pid, "rank 1 is the node's new trainer")
	assert.Equal(t, both[0].digest, both[1].digest)
	assert.Greater(t, both[0].step, alone[0].step, "the survivor trained alone meanwhile")
	require.Equal(t, 0, r.wait(), "the job succeeded:\n%s", r.out)
}
