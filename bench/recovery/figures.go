package main

import (
	"time"
)

// outcome is what one fault cost the job, from the trainers' step logs.
type outcome struct {
	// Recovery is the fault (or the scale command) → every rank of the
	// new world has taken its first step: every rank training again.
	Recovery time.Duration
	// Pause is the last step of the old generation, on any rank → every
	// rank's first step in the new one.
	Pause time.Duration
	// Lost is the work done again: the highest step the old generation
	// completed, + 1, − the step the new generation resumed from.
	Lost int
	// Start is, of the new generation's processes started after the
	// fault, the longest from a process's start (before it imports torch)
	// to its first step; -1 when no new process was started.
	Start time.Duration
	// New counts the new generation's processes started after the fault,
	// and Warm those of them that started with torch imported already
	// (in a warm interpreter).
	New, Warm int
	// Recovered is when the last rank took its first step.
	Recovered time.Time
}

// recovery reads the outcome of a fault at fault from the step logs, once
// every rank of a world of world processes has stepped in a run that had
// not stepped by fault; ok is false until then. A run is one process's
// steps in one generation (a survivor restarted in place steps in several);
// the runs that stepped by fault are the old generation's.
func recovery(procs []*proc, fault time.Time, world int) (o outcome, ok bool) {
	type first struct {
		at      time.Time
		n       int
		started time.Time
		warm    bool
	}
	firsts := map[int]first{} // by rank
	var lastOld time.Time
	maxOld := -1
	for _, p := range procs {
		byRun := map[string][]step{}
		var order []string
		for _, s := range p.steps {
			if _, seen := byRun[s.gen]; !seen {
				order = append(order, s.gen)
			}
			byRun[s.gen] = append(byRun[s.gen], s)
		}
		for _, gen := range order {
			steps := byRun[gen]
			if !steps[0].at.After(fault) { // the old generation's
				for _, s := range steps {
					if s.at.After(lastOld) {
						lastOld = s.at
					}
					maxOld = max(maxOld, s.n)
				}
				continue
			}
			s := steps[0]
			if s.world != world || s.rank < 0 || s.rank >= world {
				continue
			}
			if f, seen := firsts[s.rank]; !seen || s.at.Before(f.at) {
				started := time.Time{}
				if p.started.After(fault) {
					started = p.started
				}
				firsts[s.rank] = first{at: s.at, n: s.n, started: started, warm: p.warm}
			}
		}
	}
	if len(firsts) < world {
		return outcome{}, false
	}
	o.Start = -1
	resumed := -1
	for _, f := range firsts {
		if f.at.After(o.Recovered) {
			o.Recovered = f.at
		}
		if resumed < 0 || f.n < resumed {
			resumed = f.n
		}
		if !f.started.IsZero() {
			o.Start = max(o.Start, f.at.Sub(f.started))
			o.New++
			if f.warm {
				o.Warm++
			}
		}
	}
	o.Recovery = o.Recovered.Sub(fault)
	if !lastOld.IsZero() {
		o.Pause = o.Recovered.Sub(lastOld)
	}
	o.Lost = maxOld + 1 - resumed
	return o, true
}

// settled says whether every rank of world has taken at least n steps after
// since, in a world of that size: the job is training steadily again.
func settled(procs []*proc, since time.Time, world, n int) bool {
	count := map[int]int{}
	for _, p := range procs {
		for _, s := range p.steps {
			if s.world == world && s.at.After(since) {
				count[s.rank]++
			}
		}
	}
	for r := range world {
		if count[r] < n {
			return false
		}
	}
	return true
}

// holders returns, for each rank of a world of world processes, the
// process that stepped last as that rank: where to aim a fault.
func holders(procs []*proc, world int) map[int]int {
	last := map[int]time.Time{}
	out := map[int]int{}
	for _, p := range procs {
		if len(p.steps) == 0 {
			continue
		}
		s := p.steps[len(p.steps)-1]
		if s.world == world && s.at.After(last[s.rank]) {
			last[s.rank], out[s.rank] = s.at, p.pid
		}
	}
	return out
}

// intervals returns the time between consecutive steps of one process in
// one generation, both steps within [from, to]: the steady-state step times.
func intervals(procs []*proc, from, to time.Time) []time.Duration {
	var out []time.Duration
	for _, p := range procs {
		for i := 1; i < len(p.steps); i++ {
			a, b := p.steps[i-1], p.steps[i]
			if a.gen != b.gen || b.n != a.n+1 || a.at.Before(from) || b.at.After(to) {
				continue
			}
			out = append(out, b.at.Sub(a.at))
		}
	}
	return out
}

// lastStep returns pid's last step; the zero step when it took none.
func lastStep(procs []*proc, pid int) step {
	for _, p := range procs {
		if p.pid == pid && len(p.steps) > 0 {
			return p.steps[len(p.steps)-1]
		}
	}
	return step{}
}
