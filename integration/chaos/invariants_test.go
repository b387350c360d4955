package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

// checked runs the checks on a worker log written from lines "KIND GEN RANK
// PID MS STEP WORLD NODE" (MS from the run's start) and on the faults given.
func checked(t *testing.T, log []string, injections []injection, restarts int, left []string) *result {
	t.Helper()
	return checkedWith(t, log, injections, nil, membership.Status{Restarts: restarts}, left)
}

// checkedWith is checked with the job's events (their times in ms from the
// run's start, in Time's milliseconds since the epoch), more of its final
// status, and changes to the run's settings.
func checkedWith(t *testing.T, log []string, injections []injection, events []membership.Event, status membership.Status, left []string,
	settings ...func(*config)) *result {
	t.Helper()
	cfg := defaults()
	for _, set := range settings {
		set(&cfg)
	}
	cfg.Duration = 20 * time.Second
	r := &run{cfg: cfg, log: filepath.Join(t.TempDir(), "worker.log"), start: time.UnixMilli(1_000_000), injections: injections}
	var text strings.Builder
	for _, l := range log {
		var kind, node string
		var gen, rank, pid, ms, step, world int
		_, err := fmt.Sscan(l, &kind, &gen, &rank, &pid, &ms, &step, &world, &node)
		require.NoError(t, err, l)
		fmt.Fprintf(&text, "%s %d worker %d %d %d %d %d %s\n", kind, gen, rank, pid, r.start.Add(time.Duration(ms)*time.Millisecond).UnixMicro(), step, world, node)
	}
	require.NoError(t, os.WriteFile(r.log, []byte(text.String()), 0o600))
	for i := range r.injections {
		r.injections[i].At = r.start.Add(r.injections[i].fault.At)
	}
	final := status
	final.Phase, final.Generation = membership.JobRunning, 2
	for i := range events {
		events[i].Time = r.start.Add(time.Duration(events[i].Time.UnixMilli()) * time.Millisecond)
	}
	return analyse(r, r.start.Add(cfg.Duration), time.Second, final, nil, events, left)
}

// A clean handover: generation 1 stops, then generation 2 starts.
var clean = []string{
	"start 1 0 100 0 0 2 n0", "start 1 1 101 0 0 2 n1",
	"alive 1 0 100 50 1 2 n0", "alive 1 1 101 50 1 2 n1",
	"commit 1 0 100 60 1 2 n0",
	"alive 1 0 100 100 2 2 n0", "alive 1 1 101 100 2 2 n1",
	"term 1 0 100 150 2 2 n0", "term 1 1 101 150 2 2 n1",
	"start 2 0 200 300 1 2 n2", "start 2 1 201 300 1 2 n1",
	"alive 2 0 200 350 2 2 n2", "alive 2 1 201 350 2 2 n1",
	"commit 2 0 200 360 2 2 n2",
}

func TestTheChecksPassACleanHandover(t *testing.T) {
	res := checked(t, clean, nil, 0, nil)
	assert.Empty(t, res.violations)
	assert.Equal(t, 1, res.lostSteps, "step 2 was reached, step 1 committed")
}

// Each check, given the evidence of a broken promise, reports it.
func TestTheChecksCatchEachBrokenPromise(t *testing.T) {
	for _, tc := range []struct {
		name     string
		extra    []string
		faults   []injection
		restarts int
		left     []string
		want     string
	}{
		{name: "a rank held twice", extra: []string{"start 2 1 202 310 1 2 n3"}, want: "rank held twice"},
		{name: "an old process alive", extra: []string{"alive 1 1 101 400 3 2 n1"}, want: "alive after a later generation started"},
		{name: "a generation going back", extra: []string{"start 1 0 300 500 2 2 n4"}, want: "generation 1 started after generation 2"},
		{name: "a checkpoint going back", extra: []string{"commit 2 0 200 380 1 2 n2"}, want: "checkpoint went back"},
		{name: "progress lost beyond a checkpoint interval", extra: []string{"alive 1 0 100 120 30 2 n0"}, want: "steps behind"},
		{name: "the budget spent without a failure", restarts: 1, want: "restart budget: 1 spent, 0 training processes killed"},
		{name: "a survivor", left: []string{"pid 7: bash worker.sh"}, want: "survived the teardown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := checked(t, append(append([]string{}, clean...), tc.extra...), tc.faults, tc.restarts, tc.left)
			require.NotEmpty(t, res.violations)
			assert.Contains(t, strings.Join(res.violations, "\n"), tc.want)
		})
	}
}

// A process slow to stop steps on after its SIGTERM, and its saves are
// refused: the next generation resuming from its last commit lost nothing.
func TestStepsAfterATermAreNotProgress(t *testing.T) {
	res := checked(t, append(append([]string{}, clean...), "alive 1 0 100 160 30 2 n0"), nil, 0, nil)
	assert.Empty(t, res.violations)
	assert.Equal(t, 1, res.lostSteps, "step 2 was reached before the term, step 1 committed")
}

// A frozen node's process may beat once as it is thawed, before the guard's
// overdue timer kills it; a second beat, or one without a thaw, is a
// violation.
func TestOnlyAThawedProcessesFirstBeatIsTolerated(t *testing.T) {
	freeze := injection{fault: fault{At: 100 * time.Millisecond, Kind: freezeNode, Node: 1, For: 2 * time.Second}}
	res := checked(t, append(append([]string{}, clean...), "alive 1 1 101 2110 3 2 n1"), []injection{freeze}, 0, nil)
	assert.Empty(t, res.violations)
	assert.Len(t, res.tolerated, 1)

	res = checked(t, append(append([]string{}, clean...), "alive 1 1 101 2110 3 2 n1", "alive 1 1 101 2160 4 2 n1"), []injection{freeze}, 0, nil)
	assert.Len(t, res.violations, 1)
}

// A stop is put down to the fault that can explain it: the right node, the
// right kind, and recent enough.
func TestAStopIsPutDownToTheFaultThatExplainsIt(t *testing.T) {
	cfg := defaults()
	t0 := time.UnixMilli(1_000_000)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	injections := []injection{
		{fault: fault{Kind: partition, Node: 2, For: 4 * time.Second}, At: at(0)},
		{fault: fault{Kind: killTrainer, Node: 1}, At: at(30)},
		{fault: fault{Kind: quorumLoss, Node: 0, Peer: 1, For: 3 * time.Second}, At: at(40)},
		{fault: fault{Kind: scaleBurst, NP: []int{2, 4}}, At: at(50)},
	}
	for _, tc := range []struct {
		at      float64
		message string
		want    int
	}{
		{6, "member n2 lost", 0},
		{6, "members n12, n3 lost", -1},
		{35, "member n2 lost", -1},
		{30.1, "node n1 (worker rank 1) failed with exit code 137", 1},
		{30.1, "node n0 (worker rank 1) failed with exit code 137", -1},
		{43, "members n0, n2 lost", 2},
		{50.5, "membership change: 3 → 4 workers", 3},
	} {
		e := membership.Event{Time: at(tc.at), Type: "GenerationStopping", Message: tc.message}
		assert.Equal(t, tc.want, cause(e, injections, cfg), "%s at %.1f s", tc.message, tc.at)
	}
}
