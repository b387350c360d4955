package guard

import (
	"slices"
	"time"
)

// The hang timeouts are decisions on plain values: times in nanoseconds of
// CLOCK_MONOTONIC (MonoNow's clock, which Python's time.monotonic_ns reads
// too), what the guard learned of the job's steps, and the sidecar's Watch.
// The watcher on the guard's loop samples the pages and acts on them.

// Limits of hang detection.
const (
	// hangFloor is the least learned timeout.
	hangFloor = int64(5 * time.Second)
	// startupFloor is the least learned startup budget.
	startupFloor = int64(2 * time.Minute)
	// stoppedLimit is how long a process may be found stopped before it is
	// hung, whether or not it reports progress. A stop that is not a
	// debugger's (whose stops are 't', or T with a tracer) is nothing a
	// training process comes back from by itself, and every peer waits
	// for it meanwhile; half a second is five samples, slack for the
	// instant a whole tree is continued process by process.
	stoppedLimit = int64(500 * time.Millisecond)
	// blockedFloor is the least quiet that makes a rank blocked at a
	// graceful stop.
	blockedFloor = int64(time.Second)
	// maxInterval bounds a step interval taken from a page: a value past
	// it is not a step's, and must not overflow the multiples taken of it.
	maxInterval = int64(30 * 24 * time.Hour)
	// recentIntervals is how many of the latest step intervals the
	// median is taken over.
	recentIntervals = 64
)

// MinHangTimeout is the least hang or start-up timeout the watch honours,
// and so the least a job may be given (0, off, aside). A quiet rank is
// judged at samples watchInterval apart, so a limit is kept up to one
// sample late; and a rank whose process was stopped, which is quiet too,
// is given stoppedLimit before it counts as hung, slack for the instant a
// whole tree is continued process by process: a shorter quiet limit would
// call that rank hung first, and restart the generation for nothing.
const MinHangTimeout = time.Duration(stoppedLimit)

// learning is what the guard learned of the job's steps, over every
// generation it ran: a guard outlives its generations, so a restart keeps
// what the job showed before it.
type learning struct {
	intervals    int64 // how many step intervals were seen
	longest      int64 // the longest of them
	recent       []int64
	next         int   // where the next interval goes in recent, once full
	maxFirstStep int64 // the longest delay from a start to its first step
	stepped      bool  // a step was seen in an earlier generation
	steppedNow   bool  // a step was seen in the current generation
}

// interval learns one step interval.
func (l *learning) interval(d int64) {
	d = min(max(d, 0), maxInterval)
	l.intervals++
	l.longest = max(l.longest, d)
	if len(l.recent) < recentIntervals {
		l.recent = append(l.recent, d)
		return
	}
	l.recent[l.next] = d
	l.next = (l.next + 1) % recentIntervals
}

// firstStep learns how long a generation's rank took to its first step.
func (l *learning) firstStep(d int64) {
	l.maxFirstStep = max(l.maxFirstStep, min(max(d, 0), maxInterval))
	l.steppedNow = true
}

// newGeneration starts a generation: the steps seen so far are of an
// earlier one.
func (l *learning) newGeneration() {
	l.stepped = l.stepped || l.steppedNow
	l.steppedNow = false
}

// learned is a snapshot of learning for the pure decisions.
func (l *learning) learned() learned {
	return learned{Intervals: l.intervals, Longest: l.longest, Median: median(l.recent),
		MaxFirstStep: l.maxFirstStep, Stepped: l.stepped}
}

// learned is what the decisions take of learning.
type learned struct {
	// Intervals counts the step intervals seen; Longest is the longest,
	// Median the median of the recent ones.
	Intervals, Longest, Median int64
	// MaxFirstStep is the longest delay from a start to its first step.
	MaxFirstStep int64
	// Stepped: a step was seen in an earlier generation.
	Stepped bool
}

// median is the median of ds, 0 for none.
func median(ds []int64) int64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// hangTimeout is how long a rank that has stepped may be quiet under w; 0
// when no such limit is in force. A fixed timeout is used as it is; a
// learned one is max(hangFloor, 2 x the longest interval, 20 x the median,
// AtLeast), and is in force once there is something to learn it from: an
// interval seen, or a lower bound given.
func hangTimeout(w Watch, l learned) int64 {
	switch {
	case w.TimeoutNanos > 0:
		return w.TimeoutNanos
	case w.TimeoutNanos == 0:
		return 0
	case l.Intervals == 0 && w.AtLeastNanos == 0:
		return 0 // nothing yet says how long this job's steps take
	}
	return max(hangFloor, 2*l.Longest, 20*l.Median, w.AtLeastNanos)
}

// startupBudget is how long a rank may be quiet before the timeout is in
// force (before its first step, or while no interval was learned yet); 0
// for no limit. It applies only to a job known to report progress (Expect,
// or a step in an earlier generation), and never without quiet watching. A
// learned budget is max(startupFloor, 3 x the longest first-step delay).
func startupBudget(w Watch, l learned) int64 {
	switch {
	case w.TimeoutNanos == 0, w.StartupNanos == 0, !w.Expect && !l.Stepped:
		return 0
	case w.StartupNanos > 0:
		return w.StartupNanos
	}
	return max(startupFloor, 3*l.MaxFirstStep)
}

// pageState is what a rank's page says of its life.
type pageState struct {
	Steps        int64
	LastActivity int64 // 0 for none
	QuietUntil   int64 // 0 for none
}

// quietFor is how long a rank started at start has been quiet at now, and
// the limit that applies to it (0: it is not watched): timeout once it has
// stepped, budget before, or while timeout is not in force. Inside a
// declared quiet phase it is not quiet; after one, it is quiet from the
// phase's end.
func quietFor(now, start int64, pg pageState, timeout, budget int64) (quiet, limit int64) {
	if pg.QuietUntil > now {
		return 0, 0
	}
	quiet = max(now-max(start, pg.LastActivity, pg.QuietUntil), 0)
	limit = timeout
	if pg.Steps == 0 || limit == 0 {
		limit = budget
	}
	return quiet, limit
}

// hung reports whether a rank quiet for quiet under limit hangs.
func hung(quiet, limit int64) bool { return limit > 0 && quiet > limit }

// blocked reports whether a rank that was started at start is blocked at
// now, at a graceful stop: it reports progress, is outside a declared quiet
// phase, and has shown no sign of life for longer than max(blockedFloor, 3
// x its longest step interval of this generation). A blocked rank is in a
// collective that will never end, or stuck; SIGTERM would not help it.
func blocked(now, start int64, pg pageState, longest int64) bool {
	if pg.Steps == 0 || pg.QuietUntil > now {
		return false
	}
	return now-max(start, pg.LastActivity, pg.QuietUntil) > max(blockedFloor, 3*min(longest, maxInterval))
}

// stepIntervals splits what happened between two samples of a rank's page:
// k > 0 steps, the last at last, since the previous sample, read at prevAt,
// whose last step was at prevLast. The first of the new steps came after
// prevAt, so its interval is at least prevAt-prevLast; first is that
// interval, rest each of the k-1 others'.
func stepIntervals(prevLast, prevAt, last, k int64) (first, rest int64) {
	total := max(last-prevLast, 0)
	if k <= 1 {
		return total, 0
	}
	first = min(max(prevAt-prevLast, total/k), total)
	return first, (total - first) / (k - 1)
}
