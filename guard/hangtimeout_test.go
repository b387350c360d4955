package guard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	msec = int64(time.Millisecond)
	sec  = int64(time.Second)
)

func TestHangTimeout(t *testing.T) {
	learnedOff := Watch{TimeoutNanos: WatchLearned, StartupNanos: WatchLearned}
	for _, tc := range []struct {
		name string
		w    Watch
		l    learned
		want int64
	}{
		{"off", Watch{TimeoutNanos: 0, StartupNanos: WatchLearned}, learned{Intervals: 9, Longest: 10 * sec}, 0},
		{"fixed, not learned", Watch{TimeoutNanos: 300 * msec}, learned{Intervals: 9, Longest: 10 * sec, Median: 10 * sec}, 300 * msec},
		{"fixed ignores the lower bound", Watch{TimeoutNanos: 300 * msec, AtLeastNanos: time.Hour.Nanoseconds()}, learned{}, 300 * msec},
		{"learned, nothing to learn from", learnedOff, learned{}, 0},
		{"learned, a lower bound alone", Watch{TimeoutNanos: WatchLearned, AtLeastNanos: 30 * sec}, learned{}, 30 * sec},
		{"a lower bound under the floor", Watch{TimeoutNanos: WatchLearned, AtLeastNanos: sec}, learned{}, 5 * sec},
		{"a 20 ms step: the floor", learnedOff, learned{Intervals: 100, Longest: 31 * msec, Median: 20 * msec}, 5 * sec},
		{"twice the longest interval", learnedOff, learned{Intervals: 100, Longest: 40 * sec, Median: 100 * msec}, 80 * sec},
		{"twenty times the median", learnedOff, learned{Intervals: 100, Longest: 12 * sec, Median: 3 * sec}, 60 * sec},
		{"the lower bound wins", Watch{TimeoutNanos: WatchLearned, AtLeastNanos: 200 * sec}, learned{Intervals: 100, Longest: 40 * sec, Median: 3 * sec}, 200 * sec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, hangTimeout(tc.w, tc.l))
		})
	}
}

func TestStartupBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    Watch
		l    learned
		want int64
	}{
		{"no step seen, not expected: none", Watch{TimeoutNanos: WatchLearned, StartupNanos: WatchLearned}, learned{}, 0},
		{"expected: the floor", Watch{TimeoutNanos: WatchLearned, StartupNanos: WatchLearned, Expect: true}, learned{}, 120 * sec},
		{"a step in an earlier generation", Watch{TimeoutNanos: WatchLearned, StartupNanos: WatchLearned}, learned{Stepped: true, MaxFirstStep: 10 * sec}, 120 * sec},
		{"three times the slowest first step", Watch{TimeoutNanos: WatchLearned, StartupNanos: WatchLearned}, learned{Stepped: true, MaxFirstStep: 100 * sec}, 300 * sec},
		{"fixed", Watch{TimeoutNanos: WatchLearned, StartupNanos: 7 * sec, Expect: true}, learned{MaxFirstStep: 100 * sec}, 7 * sec},
		{"fixed, but nothing says the job steps", Watch{TimeoutNanos: WatchLearned, StartupNanos: 7 * sec}, learned{}, 0},
		{"off", Watch{TimeoutNanos: WatchLearned, StartupNanos: 0, Expect: true}, learned{Stepped: true}, 0},
		{"no quiet watching at all", Watch{TimeoutNanos: 0, StartupNanos: 7 * sec, Expect: true}, learned{Stepped: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, startupBudget(tc.w, tc.l))
		})
	}
}

func TestQuietFor(t *testing.T) {
	const start, now = 1000 * sec, 1100 * sec
	for _, tc := range []struct {
		name               string
		pg                 pageState
		timeout, budget    int64
		wantQuiet, wantLim int64
		wantHung           bool
	}{
		{"never stepped, no budget: not watched", pageState{}, 5 * sec, 0, 100 * sec, 0, false},
		{"never stepped, a budget: quiet since the start", pageState{}, 5 * sec, 60 * sec, 100 * sec, 60 * sec, true},
		{"never stepped but active: quiet since then", pageState{LastActivity: 1090 * sec}, 5 * sec, 60 * sec, 10 * sec, 60 * sec, false},
		{"stepped, within the timeout", pageState{Steps: 3, LastActivity: 1098 * sec}, 5 * sec, 0, 2 * sec, 5 * sec, false},
		{"stepped, past the timeout", pageState{Steps: 3, LastActivity: 1090 * sec}, 5 * sec, 0, 10 * sec, 5 * sec, true},
		{"stepped, no timeout in force yet: the budget", pageState{Steps: 1, LastActivity: 1090 * sec}, 0, 60 * sec, 10 * sec, 60 * sec, false},
		{"stepped, nothing in force", pageState{Steps: 1, LastActivity: 1001 * sec}, 0, 0, 99 * sec, 0, false},
		{"inside a quiet phase", pageState{Steps: 3, LastActivity: 1001 * sec, QuietUntil: 1200 * sec}, 5 * sec, 0, 0, 0, false},
		{"quiet from the end of a quiet phase", pageState{Steps: 3, LastActivity: 1001 * sec, QuietUntil: 1097 * sec}, 5 * sec, 0, 3 * sec, 5 * sec, false},
		{"an activity from the future", pageState{Steps: 3, LastActivity: 2000 * sec}, 5 * sec, 0, 0, 5 * sec, false},
		{"an activity from an earlier generation", pageState{Steps: 3, LastActivity: 10 * sec}, 5 * sec, 0, 100 * sec, 5 * sec, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quiet, limit := quietFor(now, start, tc.pg, tc.timeout, tc.budget)
			assert.Equal(t, tc.wantQuiet, quiet, "quiet")
			assert.Equal(t, tc.wantLim, limit, "limit")
			assert.Equal(t, tc.wantHung, hung(quiet, limit))
		})
	}
}

func TestBlocked(t *testing.T) {
	const start, now = 1000 * sec, 1100 * sec
	for _, tc := range []struct {
		name    string
		start   int64
		pg      pageState
		longest int64
		want    bool
	}{
		{"never stepped: it may be saving on SIGTERM", start, pageState{}, 0, false},
		{"stepping", start, pageState{Steps: 9, LastActivity: now - 100*msec}, 20 * msec, false},
		{"quiet over a second, fast steps", start, pageState{Steps: 9, LastActivity: now - 1100*msec}, 20 * msec, true},
		{"quiet under three intervals", start, pageState{Steps: 9, LastActivity: now - 8*sec}, 3 * sec, false},
		{"quiet over three intervals", start, pageState{Steps: 9, LastActivity: now - 10*sec}, 3 * sec, true},
		{"in a quiet phase", start, pageState{Steps: 9, LastActivity: now - 50*sec, QuietUntil: now + sec}, 20 * msec, false},
		{"just out of a quiet phase", start, pageState{Steps: 9, LastActivity: now - 50*sec, QuietUntil: now - 500*msec}, 20 * msec, false},
		{"started a moment ago", now - 500*msec, pageState{Steps: 1, LastActivity: 10 * sec}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, blocked(now, tc.start, tc.pg, tc.longest))
		})
	}
}

func TestStepIntervals(t *testing.T) {
	// One step: the interval is exact.
	first, rest := stepIntervals(10*sec, 10*sec+50*msec, 12*sec, 1)
	assert.Equal(t, 2*sec, first)
	assert.Zero(t, rest)
	// Five 20 msec steps since a sample read 10 msec after the last step.
	first, rest = stepIntervals(10*sec, 10*sec+10*msec, 10*sec+100*msec, 5)
	assert.Equal(t, 20*msec, first)
	assert.Equal(t, 20*msec, rest)
	// A pause of 1950 msec, seen at the sample before the two steps that
	// ended it: the pause is not averaged away.
	first, rest = stepIntervals(10*sec, 11950*msec, 12*sec, 2)
	assert.Equal(t, 1950*msec, first)
	assert.Equal(t, 50*msec, rest)
	// A clock that went back gives nothing negative.
	first, rest = stepIntervals(10*sec, 11*sec, 9*sec, 3)
	assert.Zero(t, first)
	assert.Zero(t, rest)
}

func TestLearningKeepsTheRecentMedianAndTheLongest(t *testing.T) {
	var l learning
	l.interval(30 * sec) // an evaluation pause, long ago
	for range 2 * recentIntervals {
		l.interval(20 * msec)
	}
	got := l.learned()
	assert.Equal(t, 20*msec, got.Median)
	assert.Equal(t, 30*sec, got.Longest, "the longest is remembered when it left the recent ones")
	assert.Equal(t, int64(2*recentIntervals+1), got.Intervals)
	assert.False(t, got.Stepped, "no earlier generation")

	l.firstStep(40 * sec)
	l.newGeneration()
	got = l.learned()
	require.True(t, got.Stepped)
	assert.Equal(t, 40*sec, got.MaxFirstStep)
	w := Watch{TimeoutNanos: WatchLearned, StartupNanos: WatchLearned}
	assert.Equal(t, 60*sec, hangTimeout(w, got))
	assert.Equal(t, 120*sec, startupBudget(w, got))

	l.interval(-5)
	l.interval(1 << 62)
	assert.Equal(t, maxInterval, l.learned().Longest, "a value from a page is bounded")
}
