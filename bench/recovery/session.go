package main

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"
)

// warmup is how long after a recovery the new processes' first steps are
// left out of every step time.
const warmup = 200 * time.Millisecond

func newSession(cfg *config, logDir string) session {
	return session{logs: newLogs(logDir), runs: cfg.runs, settle: cfg.settle, timeout: cfg.timeout,
		steadyAfter: cfg.steadyAfter, phase: cfg.phase, rand: rand.New(rand.NewPCG(1, 2))}
}

// session is one job under measurement: its trainers' logs, and the step
// times of its steady stretches between faults.
type session struct {
	logs    *logs
	runs    int
	settle  int
	timeout time.Duration
	// from is where the steady window starts, steadyAfter past the last
	// recovery; it runs to the next fault. The steps between the recovery
	// (past its warm-up) and from are the transient ones: a used warm
	// interpreter's replacement imports then.
	steadyAfter time.Duration
	recovered   time.Time
	from        time.Time
	steady      []time.Duration
	transient   []time.Duration
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
		s.beforeFault()
		if err := s.logs.poll(); err != nil {
			return out, err
		}
		at, world, err := fault(i)
		if err != nil {
			return out, err
		}
		s.steady = append(s.steady, intervals(s.logs.list(), s.from, at)...)
		if !s.recovered.IsZero() {
			s.transient = append(s.transient, intervals(s.logs.list(), s.recovered.Add(warmup), earliest(s.from, at))...)
		}
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
			s.recovered, s.from = o.Recovered, o.Recovered.Add(max(s.steadyAfter, warmup))
			return o, nil
		}
	}
	return outcome{}, fmt.Errorf("%d ranks not all training again within %s", world, s.timeout)
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// waitRecovery waits until every rank of world is training again after
// fault, for at most limit from the fault; ok is false when they were not
// all training again within limit.
func (s *session) waitRecovery(fault time.Time, world int, limit time.Duration) (o outcome, ok bool, err error) {
	deadline := fault.Add(limit)
	for {
		if err := s.logs.poll(); err != nil {
			return outcome{}, false, err
		}
		if o, ok := recovery(s.logs.list(), fault, world); ok {
			return o, o.Recovery <= limit, nil
		}
		if time.Now().After(deadline) {
			return outcome{}, false, nil
		}
		time.Sleep(20 * time.Millisecond) // a file, not a watch: poll it
	}
}

// beforeFault waits a random time up to phase, so that a fault falls
// anywhere in a checkpoint interval.
func (s *session) beforeFault() {
	if s.phase > 0 {
		time.Sleep(time.Duration(s.rand.Int64N(int64(s.phase))))
	}
}

// holder returns the trainer process that holds rank i % np, from the
// step logs.
func (s *session) holder(i, np int) (int, error) {
	if err := s.logs.poll(); err != nil {
		return 0, err
	}
	pid, ok := holders(s.logs.list(), np)[i%np]
	if !ok {
		return 0, fmt.Errorf("no process holds rank %d", i%np)
	}
	return pid, nil
}

// killHolder SIGKILLs the trainer of rank i % np, whoever restarts it.
func (s *session) killHolder(i, np int) (time.Time, int, error) {
	pid, err := s.holder(i, np)
	if err != nil {
		return time.Time{}, 0, err
	}
	at := time.Now()
	return at, np, syscall.Kill(pid, syscall.SIGKILL)
}

// stepLogs is the session itself, for code that takes any job.
func (s *session) stepLogs() *session { return s }
