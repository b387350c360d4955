package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rank1Log is a rank's log as run --log-dir keeps it: generation 1 hung in
// wait_forever_in_data_loader and its stack was dumped (faulthandler's own
// output, a helper thread first), then generation 2 trained.
const rank1Log = `==== generation 1: worker rank 1 of 2 (node rank 1, local rank 0), 2026-11-28T16:38:50Z ====
Thread 0x00007f4e1f5226c0 (most recent call first):
  File "/work/bench/recovery/trainer.py", line 7 in <lambda>
  File "/usr/lib/python3.11/threading.py", line 975 in run
  File "/usr/lib/python3.11/threading.py", line 1038 in _bootstrap_inner
  File "/usr/lib/python3.11/threading.py", line 995 in _bootstrap

Current thread 0x00007f4e1f7dd040 (most recent call first):
  File "/work/bench/recovery/trainer.py", line 52 in wait_forever_in_data_loader
  File "/work/bench/recovery/trainer.py", line 120 in main
  File "/work/bench/recovery/trainer.py", line 160 in <module>
==== killed ====
==== generation 2: worker rank 1 of 2 (node rank 1, local rank 0), 2026-11-28T16:38:58Z ====
hello from generation 2
`

// rank0Log is the peer's: blocked in its allreduce, in backward, when
// the stop dumped it; the signal taken by another thread.
const rank0Log = `==== generation 1: worker rank 0 of 2 (node rank 0, local rank 0), 2026-11-28T16:38:50Z ====
Current thread 0x00007f4e1f5226c0 (most recent call first):
  File "/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py", line 10 in _worker_loop

Thread 0x00007f4e1f7dd040 (most recent call first):
  File "/usr/lib/python3/dist-packages/torch/autograd/__init__.py", line 197 in backward
  File "/usr/lib/python3/dist-packages/torch/_tensor.py", line 487 in backward
  File "/work/bench/recovery/trainer.py", line 130 in main
  File "/work/bench/recovery/trainer.py", line 160 in <module>
`

func TestSplitRankLog(t *testing.T) {
	outs := splitRankLog("noise before any header\n" + rank1Log)
	require.Len(t, outs, 2)
	assert.Equal(t, "1", outs[0].gen)
	assert.Equal(t, 1, outs[0].rank)
	assert.Equal(t, "2", outs[1].gen)
	assert.Equal(t, []string{"hello from generation 2", ""}, outs[1].lines)
}

func TestStackOf(t *testing.T) {
	script := "/elsewhere/trainer.py" // matched by its base name
	tests := []struct {
		name string
		log  string
		gen  int
		want stack
	}{
		{name: "the main thread's function, not the first thread's", log: rank1Log, gen: 0, want: stack{dumped: true, in: "wait_forever_in_data_loader"}},
		{name: "no dump", log: rank1Log, gen: 1, want: stack{}},
		{name: "the main thread found by its module frame", log: rank0Log, gen: 0, want: stack{dumped: true, in: "main"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outs := splitRankLog(tt.log)
			require.Greater(t, len(outs), tt.gen)
			assert.Equal(t, tt.want, stackOf(outs[tt.gen].lines, script))
		})
	}
}

func TestStacksOfReadsEveryRankLog(t *testing.T) {
	dir := t.TempDir()
	for path, data := range map[string]string{"w-0/rank-0.log": rank0Log, "w-1/rank-1.log": rank1Log, "w-1/other.txt": "ignored"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, path), []byte(data), 0o644))
	}
	stacks, err := stacksOf(dir, "1", "trainer.py")
	require.NoError(t, err)
	assert.Equal(t, map[int]stack{0: {dumped: true, in: "main"}, 1: {dumped: true, in: "wait_forever_in_data_loader"}}, stacks)
	assert.Equal(t, stackCheck{ok: true, in: hangFunction}, checkStacks(stacks, 2, 1, hangFunction))

	stacks, err = stacksOf(dir, "2", "trainer.py")
	require.NoError(t, err)
	assert.Equal(t, map[int]stack{1: {}}, stacks)
}

func TestCheckStacks(t *testing.T) {
	tests := []struct {
		name   string
		stacks map[int]stack
		want   string
		ok     bool
		why    string
	}{
		{name: "both, named", stacks: map[int]stack{0: {dumped: true, in: "main"}, 1: {dumped: true, in: hangFunction}}, want: hangFunction, ok: true},
		{name: "both, any function", stacks: map[int]stack{0: {dumped: true}, 1: {dumped: true, in: "main"}}, ok: true},
		{name: "none", stacks: map[int]stack{}, want: hangFunction, why: "no stack in any rank's log"},
		{name: "the peer's missing", stacks: map[int]stack{1: {dumped: true, in: hangFunction}}, want: hangFunction, why: "no stack in the log of rank 0"},
		{name: "another function", stacks: map[int]stack{0: {dumped: true}, 1: {dumped: true, in: "main"}}, want: hangFunction, why: "rank 1's stack is in main, not wait_forever_in_data_loader"},
		{name: "no frame of the script", stacks: map[int]stack{0: {dumped: true}, 1: {dumped: true}}, want: hangFunction, why: "rank 1's stack has no frame of the script"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := checkStacks(tt.stacks, 2, 1, tt.want)
			assert.Equal(t, tt.ok, c.ok)
			assert.Equal(t, tt.why, c.why)
		})
	}
}

func TestPausesOf(t *testing.T) {
	// Rank 0 pauses 3 s after step 4 in generation 1; generation 2 starts
	// over from step 3 on another process.
	g1 := steps("1", 0, 2, 0, 0, 5)
	g1 = append(g1, steps("1", 0, 2, 5, 3080, 3)...)
	procs := []*proc{
		{pid: 10, steps: g1},
		{pid: 11, steps: steps("1", 1, 2, 0, 0, 8)},
		{pid: 12, steps: steps("2", 0, 2, 3, 9000, 4)},
	}
	n, pauses, gens := pausesOf(procs, 1500*time.Millisecond)
	assert.Equal(t, 7, n)
	assert.Equal(t, 1, pauses)
	assert.Equal(t, 2, gens)
}

func TestHangFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		faults  []string
		pauses  []time.Duration
		wantErr string
	}{
		{name: "defaults", faults: []string{faultStopped, faultDeadlocked}, pauses: []time.Duration{3 * time.Second, 30 * time.Second}},
		{name: "none", args: []string{"-hang-faults", "", "-pauses", ""}},
		{name: "one of each", args: []string{"-hang-faults", " deadlocked ", "-pauses", "2s"}, faults: []string{faultDeadlocked}, pauses: []time.Duration{2 * time.Second}},
		{name: "unknown fault", args: []string{"-hang-faults", "killed"}, wantErr: "unknown fault"},
		{name: "bad pause", args: []string{"-pauses", "3"}, wantErr: "-pauses"},
		{name: "no give-up", args: []string{"-give-up", "0"}, wantErr: "-give-up"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("bench", flag.ContinueOnError)
			read := registerHangFlags(fs)
			require.NoError(t, fs.Parse(tt.args))
			h, err := read()
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.faults, h.faults)
			assert.Equal(t, tt.pauses, h.pauses)
		})
	}
}

func TestHangRows(t *testing.T) {
	h := hangConfig{faults: []string{faultStopped, faultDeadlocked}, limit: 30 * time.Second, torchrunLimit: time.Minute, timeout: "1s"}
	var got []string
	for _, r := range hangRows(h, true, map[string]string{"warm": featureMemory}) {
		got = append(got, strings.Join([]string{r.fault, r.mode, r.settings, r.limit.String(), r.note}, "|"))
	}
	assert.Equal(t, []string{
		"stopped|preload|default|30s|",
		"stopped|inplace|default|30s|",
		"stopped|torchrun|-|1m0s|",
		"deadlocked|preload|default|30s|",
		"deadlocked|preload|--hang-timeout 1s|30s|",
		"deadlocked|warm|default|30s|not available on this build: " + featureMemory,
		"deadlocked|torchrun|-|1m0s|",
	}, got)
}

func TestHangReport(t *testing.T) {
	recovered := func(ms ...int) []outcome {
		var out []outcome
		for _, v := range ms {
			out = append(out, outcome{Recovery: time.Duration(v) * time.Millisecond, Lost: 1})
		}
		return out
	}
	ok := stackCheck{ok: true, in: hangFunction}
	rep := hangReport{cfg: hangConfig{limit: 30 * time.Second, torchrunLimit: time.Minute, giveUp: 2, timeout: "1s", pauseRun: 5 * time.Minute},
		missing: map[string]string{},
		results: []hangResult{{np: 2, rows: []hangRow{
			{fault: faultStopped, mode: "preload", settings: "default", limit: 30 * time.Second, tried: 3, outcomes: recovered(1500, 1400, 1600),
				timeouts: []time.Duration{5 * time.Second}, stacks: []stackCheck{{ok: true, in: "main"}, {ok: true, in: "main"}, {ok: true, in: "main"}}},
			{fault: faultStopped, mode: "torchrun", settings: "-", limit: time.Minute, tried: 2, note: "gave up after 2 faults not recovered within 1m0s"},
			{fault: faultDeadlocked, mode: "preload", settings: "default", limit: 30 * time.Second, tried: 2, outcomes: recovered(6000),
				timeouts: []time.Duration{5 * time.Second, 5 * time.Second}, stacks: []stackCheck{ok, {why: "no stack in any rank's log"}}},
			{fault: faultDeadlocked, mode: "preload", settings: "--hang-timeout 1s", limit: 30 * time.Second, tried: 1, outcomes: recovered(1300),
				timeouts: []time.Duration{0}},
			{fault: faultDeadlocked, mode: "warm", settings: "default", limit: 30 * time.Second, tried: 1, outcomes: recovered(1200),
				timeouts: []time.Duration{0}, stacks: []stackCheck{ok}},
		}, pauses: []pauseRun{
			{pause: 3 * time.Second, every: 150, ran: 5 * time.Minute, steps: 7000, pauses: 49, generations: 1, timeout: 6 * time.Second},
			{pause: 30 * time.Second, every: 150, ran: 5 * time.Minute, steps: 1300, pauses: 8, generations: 3, hangRestarts: 2, restarts: 2, timeout: 50 * time.Second},
			{pause: 10 * time.Second, every: 150, ran: 5 * time.Minute, steps: 1300, pauses: 8, generations: 1},
		}}}}
	var b strings.Builder
	rep.write(&b)
	out := b.String()
	for _, want := range []string{
		"default hang timeout, as coordinator status showed it in the jobs of default settings: 5s, 6s, 50s",
		"6000ms (6000ms–6000ms)",
		"none within 1m0s",
		"3 of 3 (rank 1 in main)",
		"1 of 2 (rank 1 in wait_forever_in_data_loader): no stack in any rank's log",
		"trainer stopped, training again: torchrun none within 1m0s, more than 40× as long as preload (1500ms)",
		"trainer stopped → training again ≤ 2s (median), default settings: met, 1500ms",
		"trainer deadlocked → training again ≤ 10s, default settings: NOT MET, 1 of 2 faults not recovered within 30s",
		"trainer deadlocked → training again ≤ 2s, --hang-timeout 1s: met, 1300ms (yet status showed no hang timeout: something else ended the hang)",
		"pausing 3s every 150 steps for 5m0s → at most 0 hang restarts: met, 0",
		"pausing 30s every 150 steps for 5m0s → at most 1 hang restart: NOT MET, 2",
		"pausing 10s every 150 steps for 5m0s → at most 1 hang restart: not measured, nothing watched the ranks (status showed no hang timeout); 0",
		"trainer deadlocked, elastic.save every step → ≤ 1 step lost: met, at most 1 step lost in 1 fault",
		"stacks of both ranks in their logs, naming the function: NOT MET, 5 of 6 faults",
		"processes of the jobs left running at the end: none",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "PARTIAL")

	for i := range rep.results[0].rows {
		rep.results[0].rows[i].timeouts, rep.results[0].rows[i].outcomes = nil, nil
	}
	rep.results[0].pauses = nil
	b.Reset()
	rep.write(&b)
	assert.Contains(t, b.String(), "PARTIAL: coordinator status showed no hang timeout in any job and no hang on run was recovered")
}
