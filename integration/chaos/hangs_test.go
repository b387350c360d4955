package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

// ms is a time in ms from the run's start, as checkedWith reads an event's.
func msAt(ms int) time.Time { return time.UnixMilli(int64(ms)) }

// hangOf is the description the coordinator gives a hang: the checks read
// the real one.
func hangOf(node string, stopped bool, timeout time.Duration) string {
	return rankHangOf(1, node, stopped, timeout)
}

func rankHangOf(rank int, node string, stopped bool, timeout time.Duration) string {
	h := membership.Hang{Node: node, Generation: 1, Rank: rank, Step: 2, Quiet: membership.Duration(timeout + 100*time.Millisecond),
		Timeout: membership.Duration(timeout), Stopped: stopped}
	if stopped {
		h.Timeout = membership.Duration(time.Second)
	}
	return h.String()
}

// hangEvents are the events of a stop of generation 1 for a hang: the
// RankHung of generation 1, the GenerationStopping of generation 2.
func hangEvents(at int, message string) []membership.Event {
	return []membership.Event{
		{Time: msAt(at), Generation: 1, Type: "RankHung", Message: message},
		{Time: msAt(at), Generation: 2, Type: "GenerationStopping", Message: message},
	}
}

func TestHangStopsAreReadFromTheCoordinatorsWords(t *testing.T) {
	stops := hangStops(append(hangEvents(100, hangOf("n1", false, 2*time.Second)),
		membership.Event{Time: msAt(500), Generation: 3, Type: "GenerationStopping", Message: hangOf("n4", true, 0)},
		membership.Event{Time: msAt(600), Generation: 4, Type: "GenerationStopping", Message: "member n2 lost"}))
	require.Len(t, stops, 2, "one stop a generation, whichever event says it")
	assert.Equal(t, hangStop{gen: 1, at: msAt(100), rank: 1, node: "n1", timeout: "2s", message: hangOf("n1", false, 2*time.Second)}, stops[0])
	assert.Equal(t, int64(2), stops[1].gen)
	assert.Equal(t, "n4", stops[1].node)
	assert.True(t, stops[1].stopped)
}

// A stopped or deadlocked trainer's generation stops for its hang, and the
// next one runs whole, within the hang timeout and a restart.
func TestAHangEndsInTime(t *testing.T) {
	stop := injection{fault: fault{At: 120 * time.Millisecond, Kind: stopTrainer, Node: 1, For: 3 * time.Second}, Pid: 101}
	deadlock := injection{fault: fault{At: 120 * time.Millisecond, Kind: deadlockTrainer, Node: 1, For: 3 * time.Second}, Pid: 101}
	// The clean handover's generation 2 runs whole at 350 ms; a late one,
	// 6 s after the fault (hang timeout 2 s, restart 3 s).
	late := []string{
		"start 1 0 100 0 0 2 n0", "start 1 1 101 0 0 2 n1",
		"alive 1 0 100 50 1 2 n0", "alive 1 1 101 50 1 2 n1",
		"term 1 0 100 5000 9 2 n0",
		"start 2 0 200 6000 1 2 n2", "start 2 1 201 6000 1 2 n1",
		"alive 2 0 200 6120 2 2 n2", "alive 2 1 201 6120 2 2 n1",
	}
	// Whole 4.5 s after the fault: in time for a deadlock (hang timeout 2
	// s), not for a stop (found after 1 s).
	slower := slicesReplace(late, "5000", "4000", "6000", "4500", "6120", "4620")
	hang := "hang 1 1 101 130 1 2 n1"
	for _, tc := range []struct {
		name      string
		log       []string
		faults    []injection
		events    []membership.Event
		violation string // "" for none
		recovery  time.Duration
		notStruck bool
		extended  bool
	}{
		{name: "stopped, ended in time", log: clean, faults: []injection{stop},
			events: hangEvents(1150, hangOf("n1", true, 0)), recovery: 230 * time.Millisecond},
		{name: "deadlocked, ended in time", log: append(append([]string{}, clean...), hang), faults: []injection{deadlock},
			events: hangEvents(2200, hangOf("n1", false, 2*time.Second)), recovery: 230 * time.Millisecond},
		{name: "stopped, ended late", log: late, faults: []injection{stop}, events: hangEvents(5000, hangOf("n1", true, 0)),
			violation: "hang not ended in time: stop-trainer"},
		{name: "deadlocked, ended late", log: append(append([]string{}, late...), hang), faults: []injection{deadlock},
			events: hangEvents(5000, hangOf("n1", false, 2*time.Second)), violation: "hang not ended in time: deadlock-trainer"},
		{name: "deadlocked, ended in the timeout and a restart", log: append(append([]string{}, slower...), hang), faults: []injection{deadlock},
			events: hangEvents(2200, hangOf("n1", false, 2*time.Second)), recovery: 4500 * time.Millisecond},
		{name: "stopped, ended later than half a second and a restart", log: slower, faults: []injection{stop},
			events: hangEvents(1200, hangOf("n1", true, 0)), violation: "found hung after 500ms, a restart in 3s"},
		{name: "stopped, never ended", log: clean[:5], faults: []injection{stop}, violation: "a later generation ran whole never"},
		{name: "late, but etcd was down meanwhile", log: late, faults: []injection{stop,
			{fault: fault{At: 1000 * time.Millisecond, Kind: quorumLoss, Node: 0, Peer: 1, For: 2 * time.Second}}},
			events: hangEvents(5000, hangOf("n1", true, 0)), recovery: 6000 * time.Millisecond, extended: true},
		{name: "late, and only etcd's lead moved meanwhile", log: late, faults: []injection{stop,
			{fault: fault{At: 1000 * time.Millisecond, Kind: moveEtcdLeader}}},
			events: hangEvents(5000, hangOf("n1", true, 0)), violation: "hang not ended in time"},
		{name: "late, and a member's links were cut meanwhile", log: late, faults: []injection{stop,
			{fault: fault{At: 1000 * time.Millisecond, Kind: partition, Node: 0, For: 4 * time.Second}}},
			events: hangEvents(5000, hangOf("n1", true, 0)), recovery: 6000 * time.Millisecond, extended: true},
		{name: "late, and only a standby's links were cut meanwhile", log: late, faults: []injection{stop,
			{fault: fault{At: 1000 * time.Millisecond, Kind: partition, Node: 4, For: 4 * time.Second}}},
			events: hangEvents(5000, hangOf("n1", true, 0)), violation: "hang not ended in time"},
		{name: "a deadlock order no step obeyed", log: late, faults: []injection{deadlock}, notStruck: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := checkedWith(t, tc.log, tc.faults, tc.events, membership.Status{HangRestarts: len(hangStops(tc.events))}, nil)
			if tc.violation != "" {
				require.NotEmpty(t, res.violations)
				assert.Contains(t, strings.Join(res.violations, "\n"), tc.violation)
				return
			}
			assert.Empty(t, res.violations)
			if tc.notStruck {
				assert.Zero(t, res.hangs.struck)
				return
			}
			assert.Equal(t, 1, res.hangs.struck)
			assert.Equal(t, []time.Duration{tc.recovery}, res.hangs.recovery[tc.faults[0].Kind])
			assert.Equal(t, map[bool]int{true: 1, false: 0}[tc.extended], res.hangs.extended)
		})
	}
}

// A stop for a hang needs a hung trainer on the node it names, in the
// generation it stops, and says what was done to it.
func TestNoFalseHangRestart(t *testing.T) {
	on := func(k kind, node int) injection {
		return injection{fault: fault{At: 120 * time.Millisecond, Kind: k, Node: node, For: 3 * time.Second}, Pid: 100 + node}
	}
	hang := "hang 1 1 101 130 1 2 n1"
	for _, tc := range []struct {
		name      string
		faults    []injection
		extra     []string
		events    []membership.Event
		budget    int
		warm      bool
		violation string // "" for none
		tolerated string
	}{
		{name: "a stopped trainer", faults: []injection{on(stopTrainer, 1)}, events: hangEvents(1150, hangOf("n1", true, 0))},
		{name: "a deadlocked trainer", faults: []injection{on(deadlockTrainer, 1)}, extra: []string{hang},
			events: hangEvents(2200, hangOf("n1", false, 2*time.Second))},
		{name: "the stopping alone says it", faults: []injection{on(stopTrainer, 1)},
			events: hangEvents(1150, hangOf("n1", true, 0))[1:]},
		{name: "a straggler", faults: []injection{on(slowRank, 1)}, events: hangEvents(2200, hangOf("n1", false, 2*time.Second)),
			violation: "false hang restart: generation 1"},
		{name: "no fault at all", events: hangEvents(2200, hangOf("n1", false, 2*time.Second)), violation: "false hang restart"},
		{name: "frozen supervisors", faults: []injection{on(freezeSupers, 1)}, events: hangEvents(2200, hangOf("n1", false, 2*time.Second)),
			violation: "false hang restart"},
		{name: "another node's trainer stopped", faults: []injection{on(stopTrainer, 0)}, events: hangEvents(1150, hangOf("n1", true, 0)),
			violation: "false hang restart"},
		{name: "a hang long after the fault", faults: []injection{on(stopTrainer, 1)}, events: hangEvents(20000, hangOf("n1", true, 0)),
			violation: "false hang restart"},
		{name: "a deadlock taken for a stop", faults: []injection{on(deadlockTrainer, 1)}, extra: []string{hang},
			events: hangEvents(2200, hangOf("n1", true, 0)), violation: "does not say the trainer made no progress"},
		{name: "a deadlock found after another timeout", faults: []injection{on(deadlockTrainer, 1)}, extra: []string{hang},
			events: hangEvents(5200, hangOf("n1", false, 5*time.Second)), violation: "for the hang timeout 2s"},
		{name: "a stop taken for a deadlock", faults: []injection{on(stopTrainer, 1)},
			events: hangEvents(2200, hangOf("n1", false, 2*time.Second)), violation: "does not say the trainer was stopped"},
		{name: "a whole node frozen, its lease kept", faults: []injection{on(freezeNode, 1)},
			events: hangEvents(3500, hangOf("n1", false, 2*time.Second)), tolerated: "whole node frozen"},
		{name: "warm rank 0 waiting on its frozen sidecar", faults: []injection{on(freezeSidecar, 0)}, warm: true,
			events: hangEvents(2500, rankHangOf(0, "n0", false, 2*time.Second)), tolerated: "elastic.flush() on its frozen sidecar"},
		{name: "cold rank 0 with its sidecar frozen", faults: []injection{on(freezeSidecar, 0)},
			events: hangEvents(2500, rankHangOf(0, "n0", false, 2*time.Second)), violation: "false hang restart"},
		{name: "warm rank 1 with its sidecar frozen", faults: []injection{on(freezeSidecar, 1)}, warm: true,
			events: hangEvents(2500, hangOf("n1", false, 2*time.Second)), violation: "false hang restart"},
		{name: "warm rank 0 stopped with its sidecar frozen", faults: []injection{on(freezeSidecar, 0)}, warm: true,
			events: hangEvents(2500, rankHangOf(0, "n0", true, 0)), violation: "false hang restart"},
		{name: "the budget spent without a stop", faults: []injection{on(stopTrainer, 1)}, budget: 1, violation: "hang budget: 1 spent, 0 stops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget := tc.budget
			if budget == 0 {
				budget = len(hangStops(tc.events))
			}
			res := checkedWith(t, append(append([]string{}, clean...), tc.extra...), tc.faults, tc.events,
				membership.Status{HangRestarts: budget}, nil, func(c *config) { c.Warm = tc.warm })
			if tc.violation != "" {
				require.NotEmpty(t, res.violations)
				assert.Contains(t, strings.Join(res.violations, "\n"), tc.violation)
				return
			}
			assert.Empty(t, res.violations)
			if tc.tolerated != "" {
				require.Len(t, res.tolerated, 1)
				assert.Contains(t, res.tolerated[0], tc.tolerated)
			}
		})
	}
}

// A deadlocked trainer that outlives its generation is seen: it logs hang
// once a second.
func TestADeadlockedTrainerOutlivingItsGenerationIsSeen(t *testing.T) {
	deadlock := injection{fault: fault{At: 120 * time.Millisecond, Kind: deadlockTrainer, Node: 1, For: 3 * time.Second}, Pid: 101}
	res := checkedWith(t, append(append([]string{}, clean...), "hang 1 1 101 130 1 2 n1", "hang 1 1 101 1130 1 2 n1"),
		[]injection{deadlock}, hangEvents(1150, hangOf("n1", false, 2*time.Second)), membership.Status{HangRestarts: 1}, nil)
	require.NotEmpty(t, res.violations)
	assert.Contains(t, strings.Join(res.violations, "\n"), "alive after a later generation started: hang gen 1")
}

// A generation stopped for a hang steps on while its ranks write their
// stacks, and its saves are refused: those steps are not progress, as
// after a SIGTERM.
func TestStepsAfterAHangStopAreNotProgress(t *testing.T) {
	stop := injection{fault: fault{At: 80 * time.Millisecond, Kind: stopTrainer, Node: 1, For: 3 * time.Second}, Pid: 101}
	log := append(append([]string{}, clean...), "alive 1 0 100 130 30 2 n0")
	res := checkedWith(t, log, []injection{stop}, hangEvents(110, hangOf("n1", true, 0)), membership.Status{HangRestarts: 1}, nil)
	assert.Empty(t, res.violations)
	assert.Equal(t, 1, res.lostSteps, "step 2 was reached before the stop, step 1 committed")

	res = checkedWith(t, log, []injection{stop}, hangEvents(140, hangOf("n1", true, 0)), membership.Status{HangRestarts: 1}, nil)
	require.NotEmpty(t, res.violations, "step 30 was reached before the stop")
	assert.Contains(t, strings.Join(res.violations, "\n"), "steps behind")
}

// slicesReplace is lines with each old string replaced by the new one
// after it, pairwise.
func slicesReplace(lines []string, pairs ...string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		for j := 0; j+1 < len(pairs); j += 2 {
			l = strings.ReplaceAll(l, " "+pairs[j]+" ", " "+pairs[j+1]+" ")
		}
		out[i] = l
	}
	return out
}

// A slow-rank fault counts as a straggler run only when the node's trainer
// stepped that slowly while it lasted.
func TestAStragglerIsCountedWhenItSteppedSlowly(t *testing.T) {
	slow := injection{fault: fault{At: 10 * time.Millisecond, Kind: slowRank, Node: 0, For: time.Second, Factor: 4}}
	res := checked(t, clean, []injection{slow}, 0, nil)
	assert.Zero(t, res.hangs.slowed, "50 ms steps on n0")

	res = checked(t, append(append([]string{}, clean...), "alive 1 0 100 260 3 2 n0"), []injection{slow}, 0, nil)
	assert.Empty(t, res.violations)
	assert.Equal(t, 1, res.hangs.slowed, "a step 160 ms after the last, 3 beats")
}
