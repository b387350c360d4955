package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// steps makes a process's steps: count steps 20 ms apart from from ms on,
// numbered from n.
func steps(gen string, rank, world, n, from, count int) []step {
	out := make([]step, count)
	for i := range out {
		out[i] = step{at: at(from + 20*i), gen: gen, rank: rank, world: world, n: n + i}
	}
	return out
}

func TestParseLine(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    step
		start   time.Time
		warm    bool
		isStart bool
		wantErr bool
	}{
		{name: "start", line: "start 1700000000.250000", start: at(250), isStart: true},
		{name: "start warm", line: "start 1700000000.250000 warm", start: at(250), warm: true, isStart: true},
		{name: "start cold", line: "start 1700000000.250000 cold", start: at(250), isStart: true},
		{name: "start, neither warm nor cold", line: "start 1700000000.250000 hot", wantErr: true},
		{name: "step", line: "step 1700000001.000000 3 1 4 120", want: step{at: at(1000), gen: "3", rank: 1, world: 4, n: 120}},
		{name: "extra spaces", line: " step  1700000001.000000 3 1 4 120 ", want: step{at: at(1000), gen: "3", rank: 1, world: 4, n: 120}},
		{name: "bad rank", line: "step 1700000001.0 3 x 4 120", wantErr: true},
		{name: "bad time", line: "start yesterday", wantErr: true},
		{name: "short", line: "step 1700000001.0 3 1 4", wantErr: true},
		{name: "other", line: "hello", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, st, isStart, err := parseLine(tt.line)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.isStart, isStart)
			assert.True(t, tt.start.Equal(st.at), "start %v, want %v", st.at, tt.start)
			assert.Equal(t, tt.warm, st.warm, "warm")
			assert.WithinDuration(t, tt.want.at, s.at, time.Microsecond)
			s.at = tt.want.at
			assert.Equal(t, tt.want, s)
		})
	}
}

func TestLogsPollReadsAppendedLinesOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "42.log")
	require.NoError(t, os.WriteFile(path, []byte("start 1700000000.0\nstep 1700000000.5 1 0 2 0\nstep 1700000000.52"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a log\n"), 0o644))
	l := newLogs(dir)
	require.NoError(t, l.poll())
	require.Len(t, l.list(), 1)
	p := l.procs[42]
	assert.True(t, at(0).Equal(p.started))
	require.Len(t, p.steps, 1, "the line being written waits for its end")

	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("0 1 0 2 1\nstep 1700000000.54 1 0 2 2\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, l.poll())
	require.Len(t, p.steps, 3)
	assert.Equal(t, []int{0, 1, 2}, []int{p.steps[0].n, p.steps[1].n, p.steps[2].n})
	assert.WithinDuration(t, at(520), p.steps[1].at, time.Microsecond)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "43.log"), []byte("garbage\n"), 0o644))
	assert.Error(t, l.poll())
}

func TestRecovery(t *testing.T) {
	tests := []struct {
		name  string
		procs []*proc
		fault time.Time
		world int
		ok    bool
		want  outcome
	}{
		{
			// Two ranks train steps 0-49 until 1000 ms; rank 1 is killed at
			// 1000; two new processes start at 1100 and resume from step 25.
			name: "kill one rank",
			procs: []*proc{
				{pid: 1, started: at(-900), steps: steps("1", 0, 2, 0, 0, 50)},
				{pid: 2, started: at(-900), steps: steps("1", 1, 2, 0, 0, 50)},
				{pid: 3, started: at(1100), steps: steps("2", 0, 2, 25, 2000, 10)},
				{pid: 4, started: at(1150), warm: true, steps: steps("2", 1, 2, 25, 2010, 10)},
			},
			fault: at(990), world: 2, ok: true,
			want: outcome{Recovery: 1020 * time.Millisecond, Pause: 1030 * time.Millisecond, Lost: 25,
				Start: 900 * time.Millisecond, New: 2, Warm: 1, Recovered: at(2010)},
		},
		{
			name: "not every rank back yet",
			procs: []*proc{
				{pid: 1, steps: steps("1", 0, 2, 0, 0, 50)},
				{pid: 3, started: at(1100), steps: steps("2", 0, 2, 25, 2000, 10)},
			},
			fault: at(990), world: 2,
		},
		{
			// The old generation steps on after the command; the new one,
			// one larger, resumes from the newest save, one step behind.
			name: "scale up: a survivor restarted in place, and a new process",
			procs: []*proc{
				{pid: 1, started: at(-900), steps: append(steps("1", 0, 2, 0, 0, 60), steps("2", 0, 3, 59, 1500, 5)...)},
				{pid: 2, started: at(-900), steps: steps("1", 1, 2, 0, 0, 60)},
				{pid: 5, started: at(1300), steps: steps("2", 1, 3, 59, 1500, 5)},
				{pid: 6, started: at(1300), steps: steps("2", 2, 3, 59, 1520, 5)},
			},
			fault: at(500), world: 3, ok: true,
			want: outcome{Recovery: 1020 * time.Millisecond, Pause: 340 * time.Millisecond, Lost: 1,
				Start: 220 * time.Millisecond, New: 2, Recovered: at(1520)},
		},
		{
			name: "a survivor in place, no new process",
			procs: []*proc{
				{pid: 1, started: at(-900), steps: append(steps("1", 0, 1, 0, 0, 10), steps("2", 0, 1, 10, 400, 3)...)},
			},
			fault: at(250), world: 1, ok: true,
			want: outcome{Recovery: 150 * time.Millisecond, Pause: 220 * time.Millisecond, Lost: 0, Start: -1, Recovered: at(400)},
		},
		{
			name: "a generation of the wrong size does not count",
			procs: []*proc{
				{pid: 1, steps: steps("1", 0, 2, 0, 0, 10)},
				{pid: 3, started: at(300), steps: steps("2", 0, 1, 5, 400, 3)},
			},
			fault: at(250), world: 2,
		},
		{
			name: "the first start of a job",
			procs: []*proc{
				{pid: 1, started: at(100), steps: steps("1", 0, 2, 0, 1000, 5)},
				{pid: 2, started: at(200), steps: steps("1", 1, 2, 0, 1000, 5)},
			},
			world: 2, ok: true,
			want: outcome{Recovery: at(1000).Sub(time.Time{}), Lost: 0, Start: 900 * time.Millisecond, New: 2, Recovered: at(1000)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := recovery(tt.procs, tt.fault, tt.world)
			require.Equal(t, tt.ok, ok)
			if !ok {
				return
			}
			assert.True(t, tt.want.Recovered.Equal(got.Recovered), "recovered at %v, want %v", got.Recovered, tt.want.Recovered)
			got.Recovered = tt.want.Recovered
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSettledHoldersIntervals(t *testing.T) {
	procs := []*proc{
		{pid: 1, steps: steps("1", 0, 2, 0, 0, 10)},
		{pid: 2, steps: steps("1", 1, 2, 0, 0, 10)},
		{pid: 3, steps: steps("2", 0, 2, 5, 500, 4)},
		{pid: 4, steps: append(steps("2", 1, 2, 5, 500, 2), step{at: at(600), gen: "2", rank: 1, world: 2, n: 7})},
	}
	assert.True(t, settled(procs, at(450), 2, 3))
	assert.False(t, settled(procs, at(450), 2, 4))
	assert.False(t, settled(procs, at(450), 3, 1), "no rank of a world of 3")
	assert.Equal(t, map[int]int{0: 3, 1: 4}, holders(procs, 2))

	got := intervals(procs, at(500), at(600))
	want := []time.Duration{20, 20, 20, 20, 80}
	for i := range want {
		want[i] *= time.Millisecond
	}
	assert.ElementsMatch(t, want, got, "steps of one process in one generation, within the window")
}
