package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// warmup is how long after a recovery the steps count as steady.
const warmup = 200 * time.Millisecond

func newSession(cfg *config, logDir string) session {
	return session{logs: newLogs(logDir), runs: cfg.runs, settle: cfg.settle, timeout: cfg.timeout,
		phase: cfg.phase, rand: rand.New(rand.NewPCG(1, 2))}
}

// session is one job under measurement: its trainers' logs, and the step
// times of its steady stretches between faults.
type session struct {
	logs    *logs
	runs    int
	settle  int
	timeout time.Duration
	// from is where the steady window starts: a few steps into the last
	// recovery, past the first steps' warm-up; it runs to the next fault.
	from   time.Time
	steady []time.Duration
	// phase is the longest random wait before a fault, so that faults
	// fall anywhere in a checkpoint interval, not always as long after
	// the last recovery.
	phase time.Duration
	rand  *rand.Rand
}

// measure runs fault runs times and returns what each cost. fault injects
// the fault of run i and returns its time and the world size after it.
func (s *session) measure(fault func(i int) (time.Time, int, error)) ([]outcome, error) {
	var out []outcome
	for i := range s.runs {
		if s.phase > 0 {
			time.Sleep(time.Duration(s.rand.Int64N(int64(s.phase))))
		}
		if err := s.logs.poll(); err != nil {
			return out, err
		}
		at, world, err := fault(i)
		if err != nil {
			return out, err
		}
		s.steady = append(s.steady, intervals(s.logs.list(), s.from, at)...)
		o, err := s.wait(at, world)
		if err != nil {
			return out, err
		}
		out = append(out, o)
	}
	return out, nil
}

// wait waits until every rank of world is training again after fault and
// has settled, and returns the fault's outcome.
func (s *session) wait(fault time.Time, world int) (outcome, error) {
	deadline := time.Now().Add(s.timeout)
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // a file, not a watch: poll it
		if err := s.logs.poll(); err != nil {
			return outcome{}, err
		}
		procs := s.logs.list()
		o, ok := recovery(procs, fault, world)
		if ok && settled(procs, o.Recovered, world, s.settle) {
			s.from = o.Recovered.Add(warmup)
			return o, nil
		}
	}
	return outcome{}, fmt.Errorf("%d ranks not all training again within %s", world, s.timeout)
}
