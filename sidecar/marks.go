package sidecar

import (
	"sync"
	"time"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/membership"
)

// rankMarks are the step marks of each rank of the generation a node
// started last, from its guard's progress reports: the latest of each
// rank, the final one (read as the rank was reaped) last of all. The
// launcher hands the reports on from the goroutine that reads the guard,
// before the run's end: a stop that returned has them all.
type rankMarks struct {
	mu    sync.Mutex
	gen   int64
	nproc int
	ranks map[int]guard.RankProgress
}

// start forgets the marks of the generation before gen.
func (m *rankMarks) start(gen int64, nproc int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen, m.nproc, m.ranks = gen, nproc, map[int]guard.RankProgress{}
}

// observe keeps what a progress report of the generation says.
func (m *rankMarks) observe(rep guard.Report) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rep.Generation != m.gen || m.ranks == nil {
		return
	}
	for _, r := range rep.Progress {
		m.ranks[r.Rank] = r
	}
}

// StepMarks implements Marker: First once every rank of the node
// stepped, from the last of them to; Last from the most advanced;
// Resumed and Furthest from the ranks that name their steps (a rank that
// names none counts its own, from 0 each generation).
func (p *Processes) StepMarks(gen int64) *membership.StepMarks { return p.marks.of(gen) }

func (m *rankMarks) of(gen int64) *membership.StepMarks {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen != m.gen || len(m.ranks) == 0 {
		return nil
	}
	out := &membership.StepMarks{Generation: gen}
	started := 0
	var slowest, named guard.RankProgress
	for _, r := range m.ranks {
		if r.FirstStepUnixNanos > 0 {
			started++
			slowest.FirstStepUnixNanos = max(slowest.FirstStepUnixNanos, r.FirstStepUnixNanos)
		}
		if r.LastStepUnixNanos > 0 && wall(r.LastStepUnixNanos).After(out.Last) {
			out.Last = wall(r.LastStepUnixNanos)
		}
		if r.FirstNamed > 0 {
			out.Furthest = max(out.Furthest, r.Step)
			if r.FirstNamedUnixNanos > named.FirstNamedUnixNanos {
				named = r
			}
		}
	}
	if named.FirstNamed > 0 {
		out.Resumed, out.ResumedAt = named.FirstNamed, wall(named.FirstNamedUnixNanos)
	}
	if started > 0 && started >= m.nproc {
		out.First = wall(slowest.FirstStepUnixNanos)
	}
	if out.First.IsZero() && out.Last.IsZero() {
		return nil
	}
	return out
}

func wall(unixNanos int64) time.Time { return time.Unix(0, unixNanos).UTC() }
