package guard

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// The hang watcher runs on the guard's loop, on a ticker that runs only
// while a watched run has processes and is not being stopped. Each tick it
// samples every process of the run: its page, and whether it (or the
// process that attached its page, when that is another process of the run)
// is stopped. It reports a rank hung once per generation (EventHung), and
// the ranks' progress about once a second while they step
// (EventProgress). It never acts on a hang itself: the sidecar decides.

const (
	// watchInterval is how often the watcher samples.
	watchInterval = 100 * time.Millisecond
	// progressEvery is how often progress is reported while ranks step.
	progressEvery = int64(time.Second)
	// rankIntervals is how many of a rank's latest step intervals its
	// reported median is taken over.
	rankIntervals = 16
)

// rankWatch is what the watcher knows of one process of the run.
type rankWatch struct {
	p *proc
	// last is the page as last sampled, at sampledAt; steps and lastStep
	// are the steps counted from it.
	last            progress
	sampledAt       int64
	steps, lastStep int64
	// recent are its latest step intervals; longest is its longest of the
	// generation.
	recent  []int64
	next    int
	longest int64
	// stoppedSince is when p was first seen stopped, 0 while it is not.
	stoppedSince int64
	attached     attachedProc
	// hung: reported, and not seen stepping since (a rank that steps
	// again may be reported again); quietUntil is the declared quiet
	// phase's end last reported.
	hung       bool
	quietUntil int64
	// quietMark is the end of its last quiet phase, as declared while it
	// lasts, as it happened once over; 0 for none.
	quietMark int64
	// marks are the times of its first and last steps (marks.go).
	marks stepMarks
}

// attachedProc is the process that attached a rank's page, when it is not
// the rank's own process: a Python trainer below a shell script.
type attachedProc struct {
	pid          int
	start        uint64 // its start time: a reused pid is another process
	ours         bool   // it runs below the rank's process
	stoppedSince int64
}

// interval learns one of the rank's step intervals.
func (rw *rankWatch) interval(d int64) {
	d = min(max(d, 0), maxInterval)
	rw.longest = max(rw.longest, d)
	if len(rw.recent) < rankIntervals {
		rw.recent = append(rw.recent, d)
		return
	}
	rw.recent[rw.next] = d
	rw.next = (rw.next + 1) % rankIntervals
}

// armWatch runs the watcher's ticker while the current run is watched,
// has processes and is not being stopped.
func (s *server) armWatch() {
	r := s.cur
	want := r != nil && r.watch != nil && len(r.procs) > 0 && !r.stopping && !s.killing
	if want == s.watching {
		return
	}
	s.watching = want
	if want {
		s.watchTicker.Reset(watchInterval)
	} else {
		s.watchTicker.Stop()
	}
}

// watchTick samples the run's processes and reports what it found.
func (s *server) watchTick() {
	r := s.cur
	if r == nil || r.watch == nil || r.stopping || s.killing {
		return
	}
	now := MonoNow()
	for _, rw := range r.ranks {
		s.sample(r, rw, now)
	}
	l := s.learn.learned()
	timeout, budget := hangTimeout(*r.watch, l), startupBudget(*r.watch, l)
	for _, rw := range r.ranks {
		if !rw.hung {
			s.judge(r, rw, now, timeout, budget)
		}
	}
	// A tick late or early by half an interval still counts as a second.
	if r.moved && (r.quietChanged || now-r.lastProgress >= progressEvery-int64(watchInterval)/2) {
		s.reportProgress(r, now, timeout)
	}
}

// sample reads a rank's page and state at now, and learns the steps it
// took since the last sample.
func (s *server) sample(r *run, rw *rankWatch, now int64) {
	if rw.p.page == nil {
		rw.observeStopped(now, 0)
		return
	}
	pr := rw.p.page.load()
	rw.last = pr
	rw.observeStopped(now, pr.Attached)
	switch {
	case pr.Steps > rw.steps && (pr.LastStep == 0 || pr.LastStep < rw.lastStep):
		// The count is seen before its time (stores seen out of order):
		// the next sample has both.
	case pr.Steps > rw.steps:
		k := pr.Steps - rw.steps
		if rw.steps == 0 {
			// With several steps at once this is their last's delay: a
			// budget learned from it is the longer for it.
			s.learn.firstStep(pr.LastStep - r.startedAt)
		} else {
			first, rest := stepIntervals(rw.lastStep, rw.sampledAt, pr.LastStep, k)
			rw.interval(first)
			s.learn.interval(first)
			for range min(k-1, recentIntervals) {
				rw.interval(rest)
				s.learn.interval(rest)
			}
		}
		rw.marks.stepped(pr)
		rw.steps, rw.lastStep = pr.Steps, pr.LastStep
		r.moved, rw.hung = true, false
	case pr.Steps < rw.steps:
		// The page was written over: count from here.
		rw.steps, rw.lastStep = max(pr.Steps, 0), pr.LastStep
	}
	if pr.QuietUntil != rw.quietUntil {
		// A quiet phase begun or ended is reported at the next tick,
		// steps or not: other nodes' ranks wait for this one meanwhile.
		// One that ended is reported by when it did, which its peers'
		// reports are held past.
		if pr.QuietUntil > now {
			rw.quietMark = pr.QuietUntil
		} else if rw.quietUntil != 0 {
			rw.quietMark = min(rw.quietUntil, now)
		}
		rw.quietUntil, r.moved, r.quietChanged = pr.QuietUntil, true, true
	}
	rw.sampledAt = now
}

// observeStopped notes whether the rank's process, or the process of the
// run that attached its page, is stopped at now.
func (rw *rankWatch) observeStopped(now int64, attached int) {
	st, ok := ReadProc(rw.p.pid)
	noteStopped(&rw.stoppedSince, rw.p.pid, ok && st.State == 'T', now)
	a := &rw.attached
	if attached <= 0 || attached == rw.p.pid {
		a.stoppedSince = 0
		return
	}
	st, ok = ReadProc(attached)
	if !ok || !st.Running() {
		a.stoppedSince = 0
		return
	}
	if a.pid != attached || a.start != st.Start {
		*a = attachedProc{pid: attached, start: st.Start, ours: IsDescendant(attached, rw.p.pid)}
	}
	noteStopped(&a.stoppedSince, attached, a.ours && st.State == 'T', now)
}

// noteStopped keeps since, when pid was first seen stopped: stopped, in
// state T, and not by a debugger that traces it (whose stops are 't', or T
// with a tracer).
func noteStopped(since *int64, pid int, stateT bool, now int64) {
	if !stateT || tracerPid(pid) != 0 {
		*since = 0
		return
	}
	if *since == 0 {
		*since = now
	}
}

// stoppedFor is how long the rank's process, or the process that attached
// its page, has been seen stopped at now; 0 when neither is.
func (rw *rankWatch) stoppedFor(now int64) int64 {
	var d int64
	for _, since := range []int64{rw.stoppedSince, rw.attached.stoppedSince} {
		if since != 0 {
			d = max(d, now-since)
		}
	}
	return d
}

// pageState is what the hang decisions take of the rank's page as last
// sampled, its last sign of life no earlier than the end of its last
// quiet phase: a phase's end is a sign of life, and a sample taken while
// the trainer ended it (the phase's word cleared, its sign of life not
// yet visible, as a CPU without ordered stores may show it) must not count
// the whole phase as quiet.
func (rw *rankWatch) pageState() pageState {
	pg := rw.last.state()
	if rw.quietMark > 0 {
		pg.LastActivity = max(pg.LastActivity, rw.quietMark)
	}
	return pg
}

// stopped reports whether the rank's process, or the process that
// attached its page, was stopped when last sampled.
func (rw *rankWatch) stopped() bool { return rw.stoppedSince != 0 || rw.attached.stoppedSince != 0 }

// judge reports the rank hung if it is: stopped for longer than
// stoppedLimit, or quiet for longer than the limit that applies to it.
func (s *server) judge(r *run, rw *rankWatch, now, timeout, budget int64) {
	pg := rw.pageState()
	if stopped := rw.stoppedFor(now); stopped > stoppedLimit {
		quiet := stopped
		if pg.Steps > 0 || pg.LastActivity > 0 {
			quiet = max(quiet, now-max(r.startedAt, pg.LastActivity))
		}
		s.reportHung(r, rw, now, quiet, stoppedLimit, true)
		return
	}
	if rw.p.page == nil {
		return
	}
	if quiet, limit := quietFor(now, r.startedAt, pg, timeout, budget); hung(quiet, limit) {
		s.reportHung(r, rw, now, quiet, limit, false)
	}
}

// reportHung reports a rank hung, once per generation.
func (s *server) reportHung(r *run, rw *rankWatch, now, quiet, limit int64, stopped bool) {
	rw.hung = true
	step, counted := rw.last.step()
	rep := Report{Event: EventHung, Seq: s.seq, Pid: rw.p.pid, Rank: rw.p.rank, Generation: r.gen,
		Step: step, Counted: counted && step > 0, QuietNanos: quiet, TimeoutNanos: limit, Stopped: stopped}
	if a := rw.last.LastActivity; a > 0 && a <= now {
		rep.LastActivityUnixNanos = time.Now().UnixNano() - (now - a)
	}
	s.out.send(rep)
}

// reportProgress reports how far the ranks are.
func (s *server) reportProgress(r *run, now, timeout int64) {
	if len(r.ranks) == 0 {
		return
	}
	r.moved, r.quietChanged, r.lastProgress = false, false, now
	rep := Report{Event: EventProgress, Seq: s.seq, Generation: r.gen, TimeoutNanos: timeout}
	wall := time.Now().UnixNano()
	for _, rw := range r.ranks {
		rep.Progress = append(rep.Progress, rw.progress(now, wall))
	}
	s.out.send(rep)
}

// progress is how far the rank is at now (CLOCK_MONOTONIC), whose wall
// clock time is wall.
func (rw *rankWatch) progress(now, wall int64) RankProgress {
	step, counted := rw.last.step()
	rp := RankProgress{Rank: rw.p.rank, Steps: rw.steps, Step: step, Counted: counted && step > 0,
		IntervalNanos: median(rw.recent), MaxIntervalNanos: rw.longest, Hung: rw.hung}
	if q := rw.quietMark; q > 0 {
		rp.QuietUntilUnixNanos = wall + (q - now)
	}
	rw.marks.put(&rp, now, wall)
	return rp
}

// forget drops the rank of a process that was reaped, and unmaps its page.
func (r *run) forget(p *proc) {
	for i, rw := range r.ranks {
		if rw.p == p {
			r.ranks = append(r.ranks[:i], r.ranks[i+1:]...)
			break
		}
	}
	p.page.close()
	p.page = nil
}

// tracerPid is the TracerPid of /proc/PID/status: the process tracing
// pid, 0 for none (or when pid is gone).
func tracerPid(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	_, rest, ok := bytes.Cut(data, []byte("\nTracerPid:"))
	if !ok {
		return 0
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	n, _ := strconv.Atoi(string(bytes.TrimSpace(line)))
	return n
}
