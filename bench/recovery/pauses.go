package main

import (
	"fmt"
	"strconv"
	"time"
)

// pauseRun is a fault-free job on coordinator run, default settings, whose
// ranks all pause together every few steps (trainer.py --pause-every,
// --pause-s: a periodic save or evaluation, declared to nobody): how many
// times it was taken for hung.
type pauseRun struct {
	pause time.Duration
	every int
	// ran is how long it was measured, from every rank's first step.
	ran time.Duration
	// steps is the highest step any rank took; pauses how many pauses
	// rank 0 went through (its step intervals of at least half a pause).
	steps  int
	pauses int
	// generations are those the trainers' step logs show.
	generations int
	// From status at the end: the hang restarts and all restarts, and the
	// hang timeout in force (0 when it showed none).
	hangRestarts int
	restarts     int
	timeout      time.Duration
	note         string
}

// measurePauses runs one job for h.pauseRun with ranks that pause for
// pause every h.pauseEvery steps.
func measurePauses(cfg *config, h hangConfig, np int, pause time.Duration) pauseRun {
	r := pauseRun{pause: pause, every: h.pauseEvery}
	m, _ := modeNamed("preload")
	// The run is measured from every rank's first step, not from a
	// settled job.
	c := *cfg
	c.settle = 1
	j, err := startCoordinator(&c, np, m, 0, extras{rankLogs: true, trainerArgs: []string{
		"--pause-every", strconv.Itoa(h.pauseEvery), "--pause-s", strconv.FormatFloat(pause.Seconds(), 'f', -1, 64)}})
	if err != nil {
		r.note = "failed: " + err.Error()
		return r
	}
	defer j.stop()
	begun := j.recovered
	for time.Since(begun) < h.pauseRun {
		time.Sleep(min(time.Second, time.Until(begun.Add(h.pauseRun))))
		if err := j.logs.poll(); err != nil {
			r.note = "failed: " + err.Error()
			return r
		}
	}
	r.ran = time.Since(begun)
	st, err := j.status()
	if err != nil {
		r.note = "failed: " + err.Error()
		return r
	}
	r.hangRestarts, r.restarts = st.HangRestarts, st.Restarts
	if st.Slowest != nil {
		r.timeout = time.Duration(st.Slowest.HangTimeout * float64(time.Second)).Round(time.Millisecond)
	}
	r.steps, r.pauses, r.generations = pausesOf(j.logs.list(), pause/2)
	if r.generations == 0 {
		r.note = fmt.Sprintf("no steps in %s", r.ran)
	}
	return r
}

// pausesOf reads the step logs of a pause run: the highest step, rank 0's
// step intervals of at least long, and the generations seen.
func pausesOf(procs []*proc, long time.Duration) (steps, pauses, generations int) {
	gens := map[string]bool{}
	for _, p := range procs {
		for i, s := range p.steps {
			gens[s.gen] = true
			steps = max(steps, s.n)
			if i > 0 && s.rank == 0 && p.steps[i-1].gen == s.gen && s.at.Sub(p.steps[i-1].at) >= long {
				pauses++
			}
		}
	}
	return steps, pauses, len(gens)
}
