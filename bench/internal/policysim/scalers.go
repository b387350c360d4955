package policysim

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/elastictraining/coordinator/autoscale"
)

// Fixed is no autoscaling: every job asks for its maximum and runs only
// with all of it, as the seed's fixed jobs of 60 trainers did.
type Fixed struct{}

func (Fixed) Name() string { return "no autoscaling" }

func (Fixed) Arrive(j *JobState) int {
	j.Min = j.Max
	return j.Max
}

func (Fixed) Pass(time.Duration, *State) map[string]int { return nil }

// EDL is PaddlePaddle EDL's rule: every Period, with requests summed over
// the cluster, each job shrinks by one trainer, the most fulfilled first,
// while requests exceed MaxLoad of the capacity, or grows by one, the least
// fulfilled first, while they stay under it. A job starts at its minimum.
type EDL struct {
	Period   time.Duration
	MaxLoad  float64
	Capacity int64
}

func (EDL) Name() string              { return "EDL, one trainer a pass" }
func (EDL) Arrive(j *JobState) int    { return j.Min }
func fulfillment(j *JobState) float64 { return frac(j.Target, j.Min, j.Max) }

func frac(n, lo, hi int) float64 {
	if hi <= lo {
		return 1
	}
	return float64(n-lo) / float64(hi-lo)
}

func (e EDL) Pass(now time.Duration, s *State) map[string]int {
	if now%e.Period != 0 {
		return nil
	}
	var requests int64
	for _, j := range s.Active {
		requests += int64(j.Target) * j.WorkerMilliCPU
	}
	limit := int64(e.MaxLoad * float64(e.Capacity))
	jobs := slices.Clone(s.Active)
	out := map[string]int{}
	if requests > limit {
		slices.SortStableFunc(jobs, func(a, b *JobState) int { return cmp.Compare(fulfillment(b), fulfillment(a)) })
		for _, j := range jobs {
			if requests <= limit {
				break
			}
			if j.Target > j.Min {
				out[j.ID] = j.Target - 1
				requests -= j.WorkerMilliCPU
			}
		}
		return out
	}
	slices.SortStableFunc(jobs, func(a, b *JobState) int { return cmp.Compare(fulfillment(a), fulfillment(b)) })
	for _, j := range jobs {
		if j.Target < j.Max && requests+j.WorkerMilliCPU <= limit {
			out[j.ID] = j.Target + 1
			requests += j.WorkerMilliCPU
		}
	}
	return out
}

// Policy is the autoscale policy, asked every second (it is event-driven
// on a cluster; a second is the simulation's step). A job starts at its
// minimum.
type Policy struct {
	Policy *autoscale.Policy
}

func (Policy) Name() string           { return "autoscale policy" }
func (Policy) Arrive(j *JobState) int { return j.Min }

// epoch turns simulated time into the policy's wall clock.
var epoch = time.Unix(0, 0)

func (p Policy) Pass(now time.Duration, s *State) map[string]int {
	snap := autoscale.Snapshot{}
	used := make([]int64, len(s.Free))
	for _, j := range s.Active {
		for _, n := range j.Placed {
			used[n] += j.WorkerMilliCPU
		}
	}
	for n, free := range s.Free {
		snap.Nodes = append(snap.Nodes, autoscale.Node{Name: nodeName(n),
			Allocatable: autoscale.Resources{MilliCPU: free + used[n]}, Used: autoscale.Resources{MilliCPU: used[n]}})
	}
	for _, j := range s.Active {
		job := autoscale.Job{ID: j.ID, Min: j.Min, Max: j.Max, Target: j.Target,
			Worker: autoscale.Resources{MilliCPU: j.WorkerMilliCPU}, Created: epoch.Add(j.Arrival)}
		if j.Changed > j.Arrival {
			job.Changed = epoch.Add(j.Changed)
		}
		for k, n := range j.Placed {
			job.Placed = append(job.Placed, autoscale.Worker{Node: nodeName(n), Ordinal: k})
		}
		snap.Jobs = append(snap.Jobs, job)
	}
	out := map[string]int{}
	for _, d := range p.Policy.Decide(snap, epoch.Add(now)).Decisions {
		out[d.Job] = d.To
	}
	return out
}

func nodeName(n int) string { return "n" + strconv.Itoa(n) }
