package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// The goodput suite's arithmetic: what a job's steps and its own account
// say of a stretch of wall time. Pure: step logs and snapshots in,
// figures out.

// progressAt returns the highest step any rank had completed by t: the
// job's progress, in which a step trained twice (after a resume below the
// furthest step reached) counts once. -1 when no step was done by t.
func progressAt(procs []*proc, t time.Time) int {
	best := -1
	for _, p := range procs {
		for _, s := range p.steps {
			if s.at.After(t) {
				break
			}
			best = max(best, s.n)
		}
	}
	return best
}

// stepRate is the job's progress from from to to, in steps a second: on
// a fault-free stretch, the rate every other stretch is held to.
func stepRate(procs []*proc, from, to time.Time) float64 {
	secs := to.Sub(from).Seconds()
	a, b := progressAt(procs, from), progressAt(procs, to)
	if secs <= 0 || a < 0 || b <= a {
		return 0
	}
	return float64(b-a) / secs
}

// window is one fault's stretch: from its boundary (just before the
// fault) to the next fault's.
type window struct {
	kind   string
	victim int
	start  time.Time
	end    time.Time
	// fault is when the fault was made; err, why it could not be.
	fault time.Time
	err   string
	// steps is the progress made in the window; lost, in seconds, is its
	// wall time less steps at the fault-free rate (negative when it went
	// faster than that).
	steps int
	lost  float64
	// job is the job's own account of the window; nil where it has none.
	job *account
	// late is the progress rate over the window's last lateStretch,
	// steps a second: the job's rate once recovered, against the
	// calibration's (the machine's load drifts).
	late float64
}

// lateStretch is the end of a window whose rate is compared with the
// calibration's.
const lateStretch = 10 * time.Second

// measureWindows fills each window's steps and lost seconds from the step
// logs, at the fault-free rate.
func measureWindows(procs []*proc, ws []window, rate float64) {
	for i := range ws {
		w := &ws[i]
		w.steps = max(0, progressAt(procs, w.end)-progressAt(procs, w.start))
		if w.end.Sub(w.start) > 2*lateStretch {
			w.late = stepRate(procs, w.end.Add(-lateStretch), w.end)
		}
		w.lost = w.end.Sub(w.start).Seconds()
		if rate > 0 {
			w.lost -= float64(w.steps) / rate
		}
	}
}

// outside is the goodput of a run of windows from the step logs: the
// progress made over them against the fault-free rate for as long; 0
// without a rate or windows.
func outside(ws []window, rate float64) float64 {
	if len(ws) == 0 || rate <= 0 {
		return 0
	}
	wall, steps := 0.0, 0
	for _, w := range ws {
		wall += w.end.Sub(w.start).Seconds()
		steps += w.steps
	}
	if wall <= 0 {
		return 0
	}
	return float64(steps) / (rate * wall)
}

// account is the job's own account of its time, as `coordinator status -o
// json` gives it under "goodput": seconds since the job began, or over a
// stretch once two snapshots are subtracted.
type account struct {
	Ratio    float64            `json:"ratio"`
	Wall     float64            `json:"wallSeconds"`
	Training float64            `json:"trainingSeconds"`
	Lost     map[string]float64 `json:"lostSeconds"`
}

// causes are the account's causes of lost seconds, in the order reports
// give them; a cause the account names besides these follows them.
var causes = []string{"starting", "restarting", "waiting", "hung", "redone", "suspended"}

// parseAccount reads the job's account out of `coordinator status -o json`;
// nil when the status has none (a build that keeps no account).
func parseAccount(data []byte) (*account, error) {
	var st struct {
		Goodput *account `json:"goodput"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	if st.Goodput == nil {
		return nil, nil
	}
	if st.Goodput.Wall < 0 || st.Goodput.Training < 0 || st.Goodput.Training > st.Goodput.Wall+1e-6 {
		return nil, fmt.Errorf("status: goodput of %.3fs training in %.3fs", st.Goodput.Training, st.Goodput.Wall)
	}
	return st.Goodput, nil
}

// since is the account of the stretch from an earlier snapshot to a; nil
// when either is nil or the stretch has no wall time.
func (a *account) since(earlier *account) *account {
	if a == nil || earlier == nil || a.Wall <= earlier.Wall {
		return nil
	}
	d := &account{Wall: a.Wall - earlier.Wall, Training: a.Training - earlier.Training, Lost: map[string]float64{}}
	for cause, s := range a.Lost {
		d.Lost[cause] = s - earlier.Lost[cause]
	}
	for cause, s := range earlier.Lost {
		if _, ok := a.Lost[cause]; !ok {
			d.Lost[cause] = -s
		}
	}
	d.Ratio = d.Training / d.Wall
	return d
}

// lostSeconds is the account's seconds not training.
func (a *account) lostSeconds() float64 { return a.Wall - a.Training }

// causesOf returns the causes an account names, in report order.
func causesOf(a *account) []string {
	out := slices.Clone(causes)
	var more []string
	for c := range a.Lost {
		if !slices.Contains(causes, c) {
			more = append(more, c)
		}
	}
	slices.Sort(more)
	return append(out, more...)
}

// kindLoss is what the faults of one kind cost a run, in seconds: from
// the outside (each window's lost seconds) and, where the job keeps one,
// its own account (each window's wall time less its training).
type kindLoss struct {
	kind    string
	outside []float64
	job     []float64
}

// lossByKind groups a run's windows by fault kind, in the order the kinds
// were first made. A window whose fault could not be made is left out.
func lossByKind(ws []window) []kindLoss {
	var out []kindLoss
	index := map[string]int{}
	for _, w := range ws {
		if w.err != "" {
			continue
		}
		i, ok := index[w.kind]
		if !ok {
			i = len(out)
			index[w.kind] = i
			out = append(out, kindLoss{kind: w.kind})
		}
		out[i].outside = append(out[i].outside, w.lost)
		if w.job != nil {
			out[i].job = append(out[i].job, w.job.lostSeconds())
		}
	}
	return out
}

// medianOf returns the median of xs (the upper middle of an even count, as
// stats.Median takes it) and its least and greatest; zeros for none.
func medianOf(xs []float64) (median, least, most float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

func sum(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t
}

// lateRates are the windows' late rates, where measured.
func lateRates(ws []window) []float64 {
	var out []float64
	for _, w := range ws {
		if w.late > 0 {
			out = append(out, w.late)
		}
	}
	return out
}
