package timeline_test

import (
	"bytes"
	"image/png"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/pngtest"
	"github.com/elastictraining/coordinator/internal/timeline"
	"github.com/elastictraining/coordinator/membership"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// Events of a coordinator that carried no account spans are read by
// their types.
func TestActivityOfEventsWithoutSpansFollowsTheGenerations(t *testing.T) {
	events := []membership.Event{
		{Seq: 1, Time: at(0), Generation: 1, Type: "GenerationStarting", Members: 2, WorldSize: 2},
		{Seq: 2, Time: at(1), Generation: 1, Type: "GenerationRunning", Members: 2, WorldSize: 2},
		{Seq: 3, Time: at(10), Generation: 2, Type: "GenerationStopping"},
		{Seq: 4, Time: at(11), Generation: 2, Type: "GenerationStarting", Members: 2, WorldSize: 2},
		{Seq: 5, Time: at(12), Generation: 2, Type: "GenerationRunning", Members: 2, WorldSize: 2},
		{Seq: 6, Time: at(20), Generation: 2, Type: "RankHung"},
		{Seq: 7, Time: at(21), Generation: 3, Type: "GenerationStopping"},
		{Seq: 8, Time: at(23), Generation: 3, Type: "GenerationRunning", Members: 2, WorldSize: 2},
	}
	spans := timeline.Activity(events, nil, at(30))
	assert.Equal(t, []timeline.Span{
		{Cause: membership.CauseRestarting, From: at(0), To: at(1)},
		{Cause: membership.CauseTraining, From: at(1), To: at(10)},
		{Cause: membership.CauseRestarting, From: at(10), To: at(12)},
		{Cause: membership.CauseTraining, From: at(12), To: at(20)},
		{Cause: membership.CauseHung, From: at(20), To: at(21)},
		{Cause: membership.CauseRestarting, From: at(21), To: at(23)},
		{Cause: membership.CauseTraining, From: at(23), To: at(30)},
	}, spans)
}

// everyCause is a job's events whose account went through every cause:
// waiting 2 s, starting 4 s, training 10 s, a hang of 5 s found by the
// timeout, restarting 3 s, redone 2 s, training 6 s, suspended 4 s,
// training from 36 s on. The spans come in the order the account makes
// them: a cause from a moment on, and later moves of what it counted.
func everyCause() []membership.Event {
	open := func(c membership.Cause, s float64) membership.Span { return membership.Span{Cause: c, From: at(s)} }
	moved := func(c membership.Cause, from, to float64) membership.Span {
		return membership.Span{Cause: c, From: at(from), To: at(to)}
	}
	return []membership.Event{
		{Seq: 1, Time: at(6), Generation: 1, Type: "GenerationStarting", Members: 2, WorldSize: 2,
			Accounted: []membership.Span{open(membership.CauseWaiting, 0), moved(membership.CauseStarting, 2, 6), open(membership.CauseStarting, 6)}},
		{Seq: 2, Time: at(7), Generation: 1, Type: "GenerationRunning", Members: 2, WorldSize: 2,
			Accounted: []membership.Span{open(membership.CauseTraining, 7)}},
		{Seq: 3, Time: at(8), Generation: 1, Type: "TimeAccounted",
			Accounted: []membership.Span{moved(membership.CauseStarting, 7, 8)}},
		{Seq: 4, Time: at(23), Generation: 1, Type: "RankHung", Message: "rank 1 on node n-1 made no progress for 5s"},
		{Seq: 5, Time: at(23), Generation: 2, Type: "GenerationStopping",
			Accounted: []membership.Span{open(membership.CauseRestarting, 23)}},
		{Seq: 6, Time: at(24), Generation: 2, Type: "TimeAccounted",
			Accounted: []membership.Span{moved(membership.CauseHung, 18, 23)}},
		{Seq: 7, Time: at(26), Generation: 2, Type: "GenerationRunning", Members: 2, WorldSize: 2,
			Accounted: []membership.Span{open(membership.CauseTraining, 26), moved(membership.CauseRedone, 26, 28)}},
		{Seq: 8, Time: at(32), Generation: 2, Type: "GenerationStopping",
			Accounted: []membership.Span{open(membership.CauseSuspended, 32)}},
		{Seq: 9, Time: at(36), Generation: 3, Type: "GenerationRunning", Members: 2, WorldSize: 2,
			Accounted: []membership.Span{open(membership.CauseTraining, 36)}},
	}
}

// The lane has the account's every cause where the account has it, the
// moves laid over the causes they moved from, up to now for a job that
// runs.
func TestActivityDrawsTheAccountsSpans(t *testing.T) {
	spans := timeline.Activity(everyCause(), &membership.Goodput{Now: membership.CauseTraining, NowSince: at(36)}, at(40))
	assert.Equal(t, []timeline.Span{
		{Cause: membership.CauseWaiting, From: at(0), To: at(2)},
		{Cause: membership.CauseStarting, From: at(2), To: at(8)},
		{Cause: membership.CauseTraining, From: at(8), To: at(18)},
		{Cause: membership.CauseHung, From: at(18), To: at(23)},
		{Cause: membership.CauseRestarting, From: at(23), To: at(26)},
		{Cause: membership.CauseRedone, From: at(26), To: at(28)},
		{Cause: membership.CauseTraining, From: at(28), To: at(32)},
		{Cause: membership.CauseSuspended, From: at(32), To: at(36)},
		{Cause: membership.CauseTraining, From: at(36), To: at(40)},
	}, spans)

	// Spans written again with a later event change nothing.
	again := append(everyCause(), membership.Event{Seq: 10, Time: at(39), Generation: 3, Type: "TimeAccounted",
		Accounted: everyCause()[0].Accounted})
	assert.Equal(t, spans, timeline.Activity(again, &membership.Goodput{Now: membership.CauseTraining, NowSince: at(36)}, at(40)))

	// A change the leader has not written in an event yet: the account
	// says the job restarts, since 38 s.
	spans = timeline.Activity(everyCause(), &membership.Goodput{Now: membership.CauseRestarting, NowSince: at(38)}, at(40))
	assert.Equal(t, []timeline.Span{
		{Cause: membership.CauseTraining, From: at(36), To: at(38)},
		{Cause: membership.CauseRestarting, From: at(38), To: at(40)},
	}, spans[len(spans)-2:])
}

// The picture's lane has each cause's colour, as wide as its seconds: read
// off the PNG's pixels.
func TestPlotColoursEveryCauseAsWideAsItsSeconds(t *testing.T) {
	account := &membership.Goodput{Since: at(0), AsOf: at(38), Now: membership.CauseTraining}
	var buf bytes.Buffer
	require.NoError(t, timeline.Plot(&buf, ".png", timeline.Job{Title: "job j", Events: everyCause(), Account: account, Now: at(40)}))
	img, err := png.Decode(&buf)
	require.NoError(t, err)

	want := map[membership.Cause]float64{ // seconds, to now (40 s)
		membership.CauseWaiting: 2, membership.CauseStarting: 6, membership.CauseTraining: 10 + 4 + 4,
		membership.CauseHung: 5, membership.CauseRestarting: 3, membership.CauseRedone: 2, membership.CauseSuspended: 4,
	}
	widths := pngtest.BandWidths(pngtest.Bottom(img, 1.0/3), timeline.CauseColors)
	total := 0
	for _, w := range widths {
		total += w
	}
	require.Positive(t, total, "a lane drawn")
	for c, s := range want {
		assert.InDelta(t, s/40, float64(widths[c])/float64(total), 0.01, "%s: %d of %d pixels", c, widths[c], total)
	}
}
