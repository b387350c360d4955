package main

import (
	"bytes"
	"flag"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faultedJob is two ranks stepping every 20 ms from step 0 at 0 ms: a
// kill at 1000 ms (steps 0–49 done), a resume at step 45 from 1500 ms,
// in generation 2: steps 45–49 are trained twice.
func faultedJob() []*proc {
	return []*proc{
		{pid: 1, steps: steps("1", 0, 2, 0, 0, 50)},
		{pid: 2, steps: steps("1", 1, 2, 0, 0, 50)},
		{pid: 3, steps: steps("2", 0, 2, 45, 1500, 100)},
		{pid: 4, steps: steps("2", 1, 2, 45, 1500, 100)},
	}
}

func TestProgressAt(t *testing.T) {
	procs := faultedJob()
	tests := []struct {
		name string
		at   int
		want int
	}{
		{name: "before any step", at: -1, want: -1},
		{name: "the first step", at: 0, want: 0},
		{name: "between steps", at: 30, want: 1},
		{name: "the last step before the fault", at: 980, want: 49},
		{name: "the stall", at: 1400, want: 49},
		{name: "resumed below the furthest step", at: 1580, want: 49},
		{name: "past it", at: 1700, want: 55},
		{name: "the end", at: 10_000, want: 144},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, progressAt(procs, at(tt.at)))
		})
	}
}

func TestStepRate(t *testing.T) {
	procs := faultedJob()
	assert.InDelta(t, 50.0, stepRate(procs, at(0), at(980)), 0.01, "49 steps in 980 ms")
	assert.Zero(t, stepRate(procs, at(-100), at(-1)), "no steps")
	assert.Zero(t, stepRate(procs, at(1100), at(1400)), "no progress")
	assert.Zero(t, stepRate(procs, at(500), at(500)), "no time")
}

func TestMeasureWindows(t *testing.T) {
	procs := faultedJob()
	ws := []window{
		{kind: faultKillRank, start: at(0), end: at(1000)},
		{kind: faultHang, start: at(1000), end: at(2000)},
	}
	measureWindows(procs, ws, 50)
	// Window 1: step 0, done at its start, is before it: steps 1–49,
	// 0.98 s at 50/s.
	assert.Equal(t, 49, ws[0].steps)
	assert.InDelta(t, 0.02, ws[0].lost, 1e-9)
	// Window 2: 49 → step 45 + 25 = 70 at 2000 ms: 21 steps, 0.42 s, of 1 s.
	assert.Equal(t, 21, ws[1].steps)
	assert.InDelta(t, 0.58, ws[1].lost, 1e-9)
	assert.InDelta(t, 70.0/100, outside(ws, 50), 1e-9)
	assert.Zero(t, outside(ws, 0))
	assert.Zero(t, outside(nil, 50))

	// Lost seconds add up to the wall time less the steps at the rate,
	// whatever the window boundaries.
	ws = []window{{start: at(0), end: at(700)}, {start: at(700), end: at(1230)}, {start: at(1230), end: at(3000)}}
	measureWindows(procs, ws, 50)
	total := 0.0
	for _, w := range ws {
		total += w.lost
	}
	assert.InDelta(t, 3.0*(1-outside(ws, 50)), total, 1e-9)
	for _, w := range ws {
		assert.Zero(t, w.late, "windows shorter than twice lateStretch have no late rate")
	}

	// A long window's late rate: its last 10 s.
	long := []*proc{{pid: 1, steps: steps("1", 0, 1, 0, 0, 1500)}}
	ws = []window{{start: at(0), end: at(30_000)}}
	measureWindows(long, ws, 50)
	assert.InDelta(t, 49.9, ws[0].late, 1e-9, "steps 1000 to 1499 in the last 10 s")
	assert.Equal(t, []float64{ws[0].late}, lateRates(ws))
}

func TestParseAccount(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		want    *account
		wantErr bool
	}{
		{name: "none", json: `{"job":"bench","phase":"Running"}`},
		{name: "null", json: `{"goodput":null}`},
		{
			name: "an account",
			json: `{"job":"bench","goodput":{"ratio":0.973,"wallSeconds":600.1,"trainingSeconds":584.0,` +
				`"lostSeconds":{"restarting":9.1,"waiting":0,"hung":5.2,"redone":1.8,"suspended":0},"lastHour":{"ratio":0.9}}}`,
			want: &account{Ratio: 0.973, Wall: 600.1, Training: 584.0,
				Lost: map[string]float64{"restarting": 9.1, "waiting": 0, "hung": 5.2, "redone": 1.8, "suspended": 0}},
		},
		{name: "more training than wall time", json: `{"goodput":{"wallSeconds":10,"trainingSeconds":11}}`, wantErr: true},
		{name: "negative", json: `{"goodput":{"wallSeconds":-1,"trainingSeconds":0}}`, wantErr: true},
		{name: "not JSON", json: `Job bench`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := parseAccount([]byte(tt.json))
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, a)
		})
	}
}

func TestAccountSince(t *testing.T) {
	a0 := &account{Wall: 100, Training: 95, Lost: map[string]float64{"restarting": 3, "hung": 2}}
	a1 := &account{Wall: 160, Training: 150, Lost: map[string]float64{"restarting": 6, "hung": 2, "waiting": 2}}
	d := a1.since(a0)
	require.NotNil(t, d)
	assert.InDelta(t, 60, d.Wall, 1e-9)
	assert.InDelta(t, 55, d.Training, 1e-9)
	assert.InDelta(t, 55.0/60, d.Ratio, 1e-9)
	assert.InDelta(t, 5, d.lostSeconds(), 1e-9)
	assert.Equal(t, map[string]float64{"restarting": 3, "hung": 0, "waiting": 2}, d.Lost)

	assert.Nil(t, a1.since(nil), "no earlier snapshot")
	assert.Nil(t, (*account)(nil).since(a0), "no later snapshot")
	assert.Nil(t, a0.since(a1), "no wall time between them")
}

func TestCausesOf(t *testing.T) {
	a := &account{Lost: map[string]float64{"restarting": 1, "preempted": 2, "draining": 3}}
	assert.Equal(t, []string{"starting", "restarting", "waiting", "hung", "redone", "suspended", "draining", "preempted"}, causesOf(a))
}

func TestLossByKind(t *testing.T) {
	ws := []window{
		{kind: faultKillRank, lost: 0.2, job: &account{Wall: 30, Training: 29.9}},
		{kind: faultHang, lost: 1.5},
		{kind: faultKillRank, lost: 0.4, job: &account{Wall: 30, Training: 29.7}},
		{kind: faultKillNode, lost: 9, err: "no process holds rank 1"},
	}
	got := lossByKind(ws)
	require.Len(t, got, 2, "a fault not made is left out")
	assert.Equal(t, faultKillRank, got[0].kind)
	assert.Equal(t, []float64{0.2, 0.4}, got[0].outside)
	require.Len(t, got[0].job, 2)
	assert.InDelta(t, 0.3, got[0].job[1], 1e-9)
	assert.Equal(t, faultHang, got[1].kind)
	assert.Empty(t, got[1].job)

	m, lo, hi := medianOf([]float64{3, 1, 2, 10})
	assert.Equal(t, []float64{3, 1, 10}, []float64{m, lo, hi})
	m, lo, hi = medianOf(nil)
	assert.Equal(t, []float64{0, 0, 0}, []float64{m, lo, hi})
	assert.Equal(t, "0.4s (0.2–0.4), Σ 0.6s", seconds(got[0].outside), "the upper middle, as stats.Median")
	assert.Equal(t, "-", seconds(nil))
}

func TestGoodputFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		faults  []string
		wantErr bool
	}{
		{name: "defaults", faults: goodputFaults},
		{name: "some faults", args: []string{"-faults", "hang, freeze"}, faults: []string{faultHang, faultFreeze}},
		{name: "an unknown fault", args: []string{"-faults", "kill-rank,reboot"}, wantErr: true},
		{name: "no fault", args: []string{"-faults", ""}, wantErr: true},
		{name: "shorter than a window", args: []string{"-duration", "10s", "-every", "30s"}, wantErr: true},
		{name: "a thaw past the window", args: []string{"-thaw", "30s"}, wantErr: true},
		{name: "a short calibration", args: []string{"-calibrate", "1s"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("recovery", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			read := registerGoodputFlags(fs)
			require.NoError(t, fs.Parse(tt.args))
			g, err := read()
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.faults, g.faults)
		})
	}
}

func TestGoodputReport(t *testing.T) {
	g := goodputConfig{duration: 90 * time.Second, every: 30 * time.Second, calibrate: time.Minute, thaw: 10 * time.Second,
		faults: []string{faultKillRank, faultHang, faultKillNode}}
	win := func(k int, kind string, steps int, lost float64, job *account) window {
		start := at(30_000 * k)
		return window{kind: kind, victim: 1, start: start, end: start.Add(30 * time.Second), fault: start, steps: steps, lost: lost, job: job}
	}
	rep := goodputReport{cfg: g, date: t0, took: 5 * time.Minute, machine: "2 CPUs", load: "1.0", command: "go run ./bench/recovery -suite goodput",
		version: "coordinator v0", torch: "1.13", python: "/usr/bin/python3", runs: []goodputRun{
			{np: 2, config: "warm", rate: 50, stepTime: 20 * time.Millisecond, windows: []window{
				{kind: faultKillRank, victim: 1, start: at(0), end: at(30_000), fault: at(0), steps: 1490, lost: 0.2, late: 47,
					job: &account{Wall: 30, Training: 29.8, Lost: map[string]float64{"restarting": 0.2}}},
				win(1, faultHang, 1400, 2, &account{Wall: 30, Training: 28, Lost: map[string]float64{"hung": 1.5, "restarting": 0.5}}),
				// (late rates 47 and 49 in the first and last: a median of 49, the upper middle)
				{kind: faultKillNode, victim: 1, start: at(60_000), end: at(90_000), fault: at(60_000), steps: 1450, lost: 1, late: 49,
					job: &account{Wall: 30, Training: 29, Lost: map[string]float64{"restarting": 1}}},
			}, job: &account{Ratio: 86.8 / 90, Wall: 90, Training: 86.8, Lost: map[string]float64{"restarting": 1.7, "hung": 1.5}}},
			{np: 2, config: "spare", note: "not available on this build: " + featureSpares},
			{np: 2, config: "torchrun", rate: 50, stepTime: 20 * time.Millisecond, jobNote: "none", windows: []window{
				win(0, faultKillRank, 1400, 2, nil),
				win(1, faultHang, 0, 30, nil),
				{kind: faultKillNode, start: at(60_000), end: at(90_000), err: "no torchrun agent to fault but the store's"},
			}},
		}}
	var buf bytes.Buffer
	rep.write(&buf)
	out := buf.String()
	for _, want := range []string{
		"PARTIAL: this build could not give np 2 coordinator, 1 spare.",
		"CONFIGURATION         FAULTS  WALL",
		// 4340 steps of 4500 at 50/s in 90 s: 96.4 %; its own 96.4 %.
		"coordinator           3       90.0s  50.0/s  20.0ms  4340   96.4%    96.4%      +0.0",
		"coordinator, 1 spare  -       -      -       -       -      -        -          -  not available on this build: no --spares on coordinator run",
		"torchrun              2       90.0s  50.0/s  20.0ms  1400   31.1%    none       -",
		"hang a rank  2.0s (2.0–2.0), Σ 2.0s  2.0s (2.0–2.0), Σ 2.0s  30.0s (30.0–30.0), Σ 30.0s",
		"coordinator, seconds lost by cause (its own account, 3.2s of 90.0s): starting 0.0s, restarting 1.7s, waiting 0.0s, hung 1.5s, redone 0.0s, suspended 0.0s",
		"torchrun: fault 3 (kill a node) not made: no torchrun agent to fault but the store's",
		// 4340 steps at 49/s in 90 s: 98.4 %.
		"coordinator, rate in the last 10s of each window: 49.0/s (47.0–49.0), -2.0% against RATE; OUTSIDE at that rate: 98.4%",
		"freeze", // not among this run's faults: only in the flag's text
	} {
		if want == "freeze" {
			assert.NotContains(t, out, "freeze a node")
			continue
		}
		assert.Contains(t, out, want)
	}
}
