package autoscale

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/elastictraining/coordinator/english"
)

// Config tunes the policy. Zero fields take the defaults.
type Config struct {
	// Cooldown is how long after a job's last change it is not grown
	// again: each change restarts the whole job. Shrinks that make room for
	// pods of a higher priority or for another job's minimum never wait.
	// Default 60s.
	Cooldown time.Duration
	// MinGain is the fewest workers a growth must add, and MinGainFraction
	// the least fraction of the job's size (default 1 and 0.1): a restart
	// that adds less is not worth its cost. Neither holds back a job still
	// below its minimum, nor a growth to the job's maximum: that is its
	// last until it shrinks (one restart a shrink at most, after the
	// cooldown), and held back the room would stay idle for as long as
	// the job runs.
	MinGain         int
	MinGainFraction float64
}

// DefaultConfig is the policy's defaults.
func DefaultConfig() Config {
	return Config{Cooldown: 60 * time.Second, MinGain: 1, MinGainFraction: 0.1}
}

// Policy decides jobs' sizes. It holds no state: everything it decides
// from is in the Snapshot.
type Policy struct {
	cfg Config
}

// New validates cfg and fills its defaults.
func New(cfg Config) (*Policy, error) {
	d := DefaultConfig()
	if cfg.Cooldown == 0 {
		cfg.Cooldown = d.Cooldown
	}
	if cfg.MinGain == 0 {
		cfg.MinGain = d.MinGain
	}
	if cfg.MinGainFraction == 0 {
		cfg.MinGainFraction = d.MinGainFraction
	}
	switch {
	case cfg.Cooldown < 0:
		return nil, errors.New("autoscale: cooldown must not be negative")
	case cfg.MinGain < 0:
		return nil, errors.New("autoscale: minimum gain must not be negative")
	case cfg.MinGainFraction < 0 || cfg.MinGainFraction > 1:
		return nil, errors.New("autoscale: minimum gain fraction must be within 0..1")
	}
	return &Policy{cfg: cfg}, nil
}

// Config returns the policy's configuration, defaults filled in.
func (p *Policy) Config() Config { return p.cfg }

// Decision is a new target for a job.
type Decision struct {
	Job      string
	From, To int
	Reason   string
	// Urgent is a decision that makes room for pods of a higher priority
	// or for a job's minimum, or that starts a job at its minimum: it is
	// carried out at once. The others (growth, giving up workers that
	// cannot be placed) can wait for the room to settle (Settler).
	Urgent bool
}

// Plan is one pass of the policy: the decisions to carry out, and what it
// saw and held back, for the log, the status and the metrics.
type Plan struct {
	Decisions []Decision
	// Desired is every job's size after this pass: its target where
	// nothing changed.
	Desired map[string]int
	// HeldBack says, by job, why a desired change waits.
	HeldBack map[string]string
	// Unplaceable are pending pods of a higher priority than some job that
	// would not fit even with every such job at its minimum.
	Unplaceable []string
}

// jobState is a job in the simulation.
type jobState struct {
	*Job
	kept    []Worker // placed workers it keeps, lowest ordinals first
	added   int      // workers the simulation placed for it
	addedOn []string // the nodes of the workers growth placed
	full    bool     // nothing more of its shape fits
	frozen  bool     // may not grow in this pass
	reasons []string
	shrunk  bool // gave workers to a higher precedence
}

func (j *jobState) size() int { return len(j.kept) + j.added }

// missingOrdinals are the ordinals below the job's target with no placed
// worker, lowest first: the pods a StatefulSet of that size has yet to
// place.
func (j *jobState) missingOrdinals() []int {
	if j.Target == 0 {
		return nil
	}
	placed := map[int]bool{}
	for _, w := range j.kept {
		placed[w.Ordinal] = true
	}
	var out []int
	for o := 0; o < j.Target; o++ {
		if !placed[o] {
			out = append(out, o)
		}
	}
	return out
}

// Decide runs one pass over s at time now.
func (p *Policy) Decide(s Snapshot, now time.Time) Plan {
	c := newCluster(s.Nodes)
	jobs := make([]*jobState, 0, len(s.Jobs))
	byID := map[string]*jobState{}
	for i := range s.Jobs {
		j := &jobState{Job: &s.Jobs[i]}
		j.kept = slices.Clone(j.Placed)
		slices.SortFunc(j.kept, func(a, b Worker) int { return cmp.Compare(a.Ordinal, b.Ordinal) })
		// Workers beyond the target are on their way out.
		for len(j.kept) > max(j.current(), 0) {
			last := j.kept[len(j.kept)-1]
			j.kept = j.kept[:len(j.kept)-1]
			c.release(last.Node, j.Worker)
		}
		jobs = append(jobs, j)
		byID[j.ID] = j
	}
	plan := Plan{Desired: map[string]int{}, HeldBack: map[string]string{}}

	// 0. What jobs were already given keeps its claim: their pending pods
	// and workers not yet placed (being created, or waiting for the
	// scheduler) take the room they fit in, the oldest job first. Left
	// out, they would look like free room at every pass, and a job that
	// just grew would be shrunk again before its pods were bound.
	reserved := map[string]bool{}
	byAge := slices.Clone(jobs)
	slices.SortStableFunc(byAge, func(a, b *jobState) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(b.Rank, a.Rank), a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	for _, j := range byAge {
		for _, pod := range s.Pending {
			if pod.Job == j.ID {
				if _, ok := c.place(pod.Request, pod.Eligible); ok {
					reserved[pod.Name] = true
				}
			}
		}
		for _, ordinal := range j.missingOrdinals() {
			node, ok := c.place(j.Worker, j.Eligible)
			if !ok {
				break
			}
			j.kept = append(j.kept, Worker{Node: node, Ordinal: ordinal})
		}
		slices.SortFunc(j.kept, func(a, b Worker) int { return cmp.Compare(a.Ordinal, b.Ordinal) })
	}

	// 1. Pending pods of other workloads keep the room they fit in, the
	// highest priority first; for one that outranks a job and does not
	// fit, jobs of a lower priority shrink.
	others := slices.Clone(s.Pending)
	slices.SortStableFunc(others, func(a, b Pod) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(b.Request.MilliCPU, a.Request.MilliCPU), strings.Compare(a.Name, b.Name))
	})
	for _, pod := range others {
		if pod.Job != "" {
			continue // a job's own pods are placed with its minimum
		}
		outranked := func(j *jobState) bool { return j.Priority < pod.Priority }
		if !makeRoom(c, jobs, []demand{{pod.Request, pod.Eligible}}, outranked, "room for pending pod "+pod.Name) &&
			slices.ContainsFunc(jobs, outranked) {
			plan.Unplaceable = append(plan.Unplaceable, pod.Name)
		}
	}

	// 2. Jobs below their minimum, by precedence: their own pending pods
	// and the workers they lack, taken from jobs of no higher priority
	// that are above their own minimum.
	slices.SortStableFunc(jobs, func(a, b *jobState) int { return precedence(a, b, a.size(), b.size()) })
	for _, j := range jobs {
		lack := j.Min - j.size()
		if lack <= 0 {
			continue
		}
		var reqs []demand
		for _, pod := range s.Pending {
			if pod.Job == j.ID && !reserved[pod.Name] {
				reqs = append(reqs, demand{pod.Request, pod.Eligible})
			}
		}
		for range lack {
			reqs = append(reqs, demand{j.Worker, j.Eligible})
		}
		victim := func(v *jobState) bool { return v != j && v.Priority <= j.Priority }
		if makeRoom(c, jobs, reqs, victim, fmt.Sprintf("room for job %s to reach its minimum of %d", j.ID, j.Min)) {
			j.added += lack
		}
	}

	// 3. Growth into what is left, one worker at a time to the job that
	// comes first: the highest priority, then the least fulfilled, then
	// the oldest. A job that may not grow now (its cooldown) leaves the
	// room to the others; one whose growth would fall short of the
	// minimum gain gives it back, and the others share it again.
	for _, j := range jobs {
		j.frozen = j.size() >= j.Min && j.Target != 0 && !p.cooledDown(j.Job, now)
	}
	for {
		p.grow(c, jobs)
		short := false
		for _, j := range jobs {
			if j.frozen || j.added == 0 || j.size()-j.added < j.Min {
				continue
			}
			if gain, need := j.size()-j.current(), p.minGain(j.current()); gain > 0 && gain < need && j.size() < j.Max {
				j.releaseAdded(c)
				j.frozen, short = true, true
				plan.HeldBack[j.ID] = fmt.Sprintf("growth to %d adds %s, less than the minimum gain of %d", j.current()+gain, english.Count(gain, "worker"), need)
			}
		}
		if !short {
			break
		}
	}
	for _, j := range jobs {
		if j.frozen && j.size() >= j.Min && plan.HeldBack[j.ID] == "" && j.size() < j.Max {
			if node, ok := c.place(j.Worker, j.Eligible); ok {
				c.release(node, j.Worker)
				plan.HeldBack[j.ID] = fmt.Sprintf("growth waits for the cooldown, until %s",
					j.Changed.Add(p.cfg.Cooldown).UTC().Format(time.TimeOnly))
			}
		}
	}

	// 4. Decisions: the jobs whose size changed.
	slices.SortFunc(jobs, func(a, b *jobState) int { return strings.Compare(a.ID, b.ID) })
	for _, j := range jobs {
		want := max(j.size(), j.Min)
		plan.Desired[j.ID] = want
		from := j.current()
		if want == from && j.Target != 0 {
			continue
		}
		reason := strings.Join(j.reasons, "; ")
		urgent := j.shrunk || from < j.Min || j.Target == 0
		switch {
		case want < from:
			if reason == "" {
				reason = fmt.Sprintf("%d of %s can be placed", want, english.Count(from, "worker"))
			}
		case from < j.Min || j.Target == 0:
			reason = cmp.Or(reason, fmt.Sprintf("%s fit (minimum %d)", english.Count(want, "worker"), j.Min))
		default:
			reason = fmt.Sprintf("%d more %s fit", want-from, english.Plural(want-from, "worker"))
		}
		plan.Decisions = append(plan.Decisions, Decision{Job: j.ID, From: from, To: want, Reason: reason, Urgent: urgent})
	}
	return plan
}

// grow gives the free room to the jobs that may grow, one worker at a time
// to the one that comes first.
func (p *Policy) grow(c *cluster, jobs []*jobState) {
	for {
		var best *jobState
		for _, j := range jobs {
			if j.frozen || j.full || j.size() >= j.Max || j.size() < j.Min {
				continue
			}
			if best == nil || precedence(j, best, j.size(), best.size()) < 0 {
				best = j
			}
		}
		if best == nil {
			return
		}
		node, ok := c.place(best.Worker, best.Eligible)
		if !ok {
			best.full = true // nothing of its shape fits; others may
			continue
		}
		best.added++
		best.addedOn = append(best.addedOn, node)
	}
}

// cooledDown reports whether a job's cooldown since its last change is
// over.
func (p *Policy) cooledDown(j *Job, now time.Time) bool {
	return j.Changed.IsZero() || !now.Before(j.Changed.Add(p.cfg.Cooldown))
}

// minGain is the fewest workers worth a restart of a job of n workers.
func (p *Policy) minGain(n int) int {
	return max(p.cfg.MinGain, int(math.Ceil(p.cfg.MinGainFraction*float64(n))))
}

// releaseAdded gives back the room of the workers growth placed for j.
func (j *jobState) releaseAdded(c *cluster) {
	for _, node := range j.addedOn {
		c.release(node, j.Worker)
	}
	j.added -= len(j.addedOn)
	j.addedOn = nil
}

// precedence orders jobs: the highest priority, then rank, then the least
// fulfilled (at sizes na and nb), then the oldest, then by id.
func precedence(a, b *jobState, na, nb int) int {
	return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(b.Rank, a.Rank), cmp.Compare(a.fulfillment(na), b.fulfillment(nb)),
		a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
}

// makeRoom places every request, shrinking jobs that victim allows
// (the lowest priority, then the most fulfilled, then the youngest first;
// never below their minimum) until they fit. If they cannot all fit,
// nothing is placed and nothing shrinks: a shrink that places nothing would
// restart a job for nothing.
func makeRoom(c *cluster, jobs []*jobState, reqs []demand, victim func(*jobState) bool, why string) bool {
	type removal struct {
		job *jobState
		w   Worker
	}
	var removed []removal
	var placed []struct {
		node string
		req  Resources
	}
	undo := func() {
		for _, pl := range placed {
			c.release(pl.node, pl.req)
		}
		for i := len(removed) - 1; i >= 0; i-- {
			r := removed[i]
			c.take(r.w.Node, r.job.Worker)
			r.job.kept = append(r.job.kept, r.w)
		}
	}
	for _, d := range reqs {
		for {
			if node, ok := c.place(d.req, d.eligible); ok {
				placed = append(placed, struct {
					node string
					req  Resources
				}{node, d.req})
				break
			}
			v := pickVictim(jobs, victim)
			if v == nil {
				undo()
				return false
			}
			w := v.kept[len(v.kept)-1]
			v.kept = v.kept[:len(v.kept)-1]
			c.release(w.Node, v.Worker)
			removed = append(removed, removal{v, w})
		}
	}
	for _, r := range removed {
		if !r.job.shrunk || !slices.Contains(r.job.reasons, why) {
			r.job.reasons = append(r.job.reasons, why)
		}
		r.job.shrunk = true
	}
	return true
}

// pickVictim is the job to lose a worker: among those victim allows with a
// placed worker above their minimum, the lowest priority, then rank, then
// the most fulfilled, then the youngest.
func pickVictim(jobs []*jobState, victim func(*jobState) bool) *jobState {
	var best *jobState
	for _, j := range jobs {
		if !victim(j) || len(j.kept) == 0 || j.size() <= j.Min {
			continue
		}
		if best == nil || cmp.Or(cmp.Compare(j.Priority, best.Priority), cmp.Compare(j.Rank, best.Rank), cmp.Compare(best.fulfillment(best.size()), j.fulfillment(j.size())),
			best.Created.Compare(j.Created), strings.Compare(j.ID, best.ID)) < 0 {
			best = j
		}
	}
	return best
}

// demand is a pod to place: its request and the nodes it may go to.
type demand struct {
	req      Resources
	eligible map[string]bool
}
