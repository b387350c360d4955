package policysim

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Config is a simulation.
type Config struct {
	// NodeMilliCPU is each node's allocatable CPU.
	NodeMilliCPU []int64
	// RestartCost is how long a job makes no progress after its number of
	// workers changes, a start included.
	RestartCost time.Duration
	// Limit ends the simulation; jobs unfinished by then count as
	// finishing at it.
	Limit time.Duration
}

// Scaler sets jobs' targets. Pass is called every second; it returns the
// new targets of the jobs it changes.
type Scaler interface {
	Name() string
	// Arrive gives an arriving job its first target.
	Arrive(j *JobState) int
	Pass(now time.Duration, s *State) map[string]int
}

// JobState is a job as the simulation runs it.
type JobState struct {
	Job
	Target  int
	Changed time.Duration // when Target last changed
	// Placed are the nodes of its placed workers, by ordinal; pending
	// workers (ordinals from len(Placed) to Target-1) wait for room.
	Placed []int
	left   float64 // work left

	running      int           // workers training now (0 below Min)
	restartUntil time.Duration // no progress before
	Started      time.Duration // -1 until it first runs with Min
	Finished     time.Duration // -1 until done
	Restarts     int           // changes of its running size after the start
	runSeconds   float64
}

// State is the cluster as the simulation has it.
type State struct {
	Free   []int64     // per node
	Active []*JobState // arrived and not finished, by arrival
}

// Result is what a simulation measured.
type Result struct {
	Scaler string
	Jobs   []*JobState
	// Utilization is the CPU requests of placed workers over allocatable,
	// averaged over the time until the last job finished.
	Utilization float64
	AvgJCT      time.Duration
	AvgPending  time.Duration
	// Restarts are changes of a running job's size; per job-hour counts
	// the hours jobs ran.
	Restarts           int
	RestartsPerJob     float64
	RestartsPerJobHour float64
	Makespan           time.Duration
}

// Run replays jobs under scaler.
func Run(cfg Config, jobs []Job, scaler Scaler) (Result, error) {
	if len(cfg.NodeMilliCPU) == 0 || cfg.Limit <= 0 {
		return Result{}, fmt.Errorf("policysim: no nodes or no limit")
	}
	st := &State{Free: slices.Clone(cfg.NodeMilliCPU)}
	var capacity int64
	for _, c := range cfg.NodeMilliCPU {
		capacity += c
	}
	pending := slices.Clone(jobs)
	slices.SortStableFunc(pending, func(a, b Job) int { return cmp.Compare(a.Arrival, b.Arrival) })
	var all []*JobState
	var usedSum float64
	var now time.Duration
	for now = 0; now < cfg.Limit; now += time.Second {
		for len(pending) > 0 && pending[0].Arrival <= now {
			j := &JobState{Job: pending[0], left: pending[0].Work, Started: -1, Finished: -1, Changed: now}
			j.Target = scaler.Arrive(j)
			pending = pending[1:]
			st.Active = append(st.Active, j)
			all = append(all, j)
		}
		for id, target := range scaler.Pass(now, st) {
			for _, j := range st.Active {
				if j.ID == id && j.Target != target {
					j.Target, j.Changed = target, now
				}
			}
		}
		st.schedule()
		var used int64
		for _, j := range st.Active {
			used += int64(len(j.Placed)) * j.WorkerMilliCPU
			j.step(now, cfg.RestartCost)
		}
		usedSum += float64(used) / float64(capacity)
		st.finish(now)
		if len(pending) == 0 && len(st.Active) == 0 {
			now += time.Second
			break
		}
	}
	for _, j := range st.Active {
		j.Finished = now
	}
	r := Result{Scaler: scaler.Name(), Jobs: all, Makespan: now, Utilization: usedSum / now.Seconds()}
	var jct, wait time.Duration
	var hours float64
	for _, j := range all {
		jct += j.Finished - j.Arrival
		started := j.Started
		if started < 0 {
			started = now
		}
		wait += started - j.Arrival
		r.Restarts += j.Restarts
		hours += j.runSeconds / 3600
	}
	if n := len(all); n > 0 {
		r.AvgJCT, r.AvgPending = jct/time.Duration(n), wait/time.Duration(n)
		r.RestartsPerJob = float64(r.Restarts) / float64(n)
	}
	if hours > 0 {
		r.RestartsPerJobHour = float64(r.Restarts) / hours
	}
	return r, nil
}

// schedule shrinks jobs to their targets (highest ordinals first) and
// places pending workers, the oldest job first, each on the node it fits
// best, as a StatefulSet and the scheduler would.
func (s *State) schedule() {
	for _, j := range s.Active {
		for len(j.Placed) > j.Target {
			last := j.Placed[len(j.Placed)-1]
			j.Placed = j.Placed[:len(j.Placed)-1]
			s.Free[last] += j.WorkerMilliCPU
		}
	}
	for _, j := range s.Active {
		for len(j.Placed) < j.Target {
			best := -1
			for n, free := range s.Free {
				if free >= j.WorkerMilliCPU && (best < 0 || free < s.Free[best]) {
					best = n
				}
			}
			if best < 0 {
				break
			}
			s.Free[best] -= j.WorkerMilliCPU
			j.Placed = append(j.Placed, best)
		}
	}
}

// step advances a job by a second.
func (j *JobState) step(now, restartCost time.Duration) {
	n := len(j.Placed)
	if n < j.Min {
		n = 0
	}
	if n != j.running {
		if n > 0 {
			if j.Started < 0 {
				j.Started = now
			} else {
				j.Restarts++
			}
			j.restartUntil = now + restartCost
		}
		j.running = n
	}
	if n == 0 {
		return
	}
	j.runSeconds++
	if now >= j.restartUntil {
		j.left -= j.Speedup(n)
	}
}

// finish removes finished jobs and frees their nodes.
func (s *State) finish(now time.Duration) {
	s.Active = slices.DeleteFunc(s.Active, func(j *JobState) bool {
		if j.left > 0 {
			return false
		}
		j.Finished = now + time.Second
		for _, n := range j.Placed {
			s.Free[n] += j.WorkerMilliCPU
		}
		j.Placed = nil
		return true
	})
}
