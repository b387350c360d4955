package membership_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

var t0 = time.Date(2026, 1, 1, 10, 0, 30, 0, time.UTC)

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

func TestGoodputAddsUpToWallTime(t *testing.T) {
	g := membership.NewGoodput(t0, membership.CauseRestarting)
	steps := []struct {
		after float64
		next  membership.Cause
	}{{2, membership.CauseTraining}, {50, membership.CauseWaiting}, {7.5, membership.CauseRestarting}, {0.25, membership.CauseTraining}, {100, membership.CauseHung}}
	at := t0
	for _, s := range steps {
		at = at.Add(sec(s.after))
		g.Accrue(at)
		g.Now = s.next
	}
	require.NoError(t, g.Validate())
	assert.InDelta(t, 159.75, g.Total.Wall(), 1e-9)
	assert.InDelta(t, 150, g.Total.Training, 1e-9)
	assert.InDelta(t, 2.25, g.Total.Restarting, 1e-9)
	assert.InDelta(t, 7.5, g.Total.Waiting, 1e-9)
	var minutes membership.Seconds
	for _, m := range g.Minutes {
		for _, c := range membership.Causes {
			minutes.Add(c, m.Seconds.Of(c))
		}
	}
	assert.Equal(t, 4, len(g.Minutes), "10:00 to 10:03")
	assert.InDelta(t, g.Total.Wall(), minutes.Wall(), 1e-9, "the minutes hold every second of the hour")

	// A reader adds the time since AsOf to the cause of the moment,
	// writing nothing.
	acc := g.At(at.Add(sec(10)))
	assert.InDelta(t, 10, acc.Total.Hung, 1e-9)
	assert.InDelta(t, 169.75, acc.LastHour.Wall(), 1e-9)
	assert.InDelta(t, 159.75, g.Total.Wall(), 1e-9)
}

func TestGoodputMoveAndOwed(t *testing.T) {
	g := membership.NewGoodput(t0, membership.CauseTraining)
	g.Accrue(t0.Add(sec(10)))
	// The last 2s of training were the quiet of a hung rank; and a span
	// beyond what is accounted moves nothing beyond it.
	g.Move(t0.Add(sec(8)), t0.Add(sec(20)), membership.CauseTraining, membership.CauseHung)
	assert.InDelta(t, 8, g.Total.Training, 1e-9)
	assert.InDelta(t, 2, g.Total.Hung, 1e-9)

	// Owed re-done seconds are paid by the next training seconds.
	g.Owed = 1.5
	g.Accrue(t0.Add(sec(11)))
	assert.InDelta(t, 1, g.Total.Redone, 1e-9)
	assert.InDelta(t, 0.5, g.Owed, 1e-9)
	g.Accrue(t0.Add(sec(13)))
	assert.InDelta(t, 1.5, g.Total.Redone, 1e-9)
	assert.Zero(t, g.Owed)
	assert.InDelta(t, 13, g.Total.Wall(), 1e-9)
	assert.InDelta(t, 9.5/13, g.Total.Ratio(), 1e-9)
}

func TestGoodputKeepsAnHour(t *testing.T) {
	g := membership.NewGoodput(t0, membership.CauseTraining)
	g.Accrue(t0.Add(3 * time.Hour))
	require.NoError(t, g.Validate())
	assert.Len(t, g.Minutes, membership.GoodputMinutes)
	acc := g.At(t0.Add(3 * time.Hour))
	assert.InDelta(t, 3*3600, acc.Total.Training, 1e-6)
	assert.InDelta(t, 3600, acc.LastHour.Training, 60, "the last hour, and the minute under way")
	// An ended account stops: later readers add nothing.
	g.Now = ""
	assert.Equal(t, g.At(t0.Add(5*time.Hour)).Total, g.Total)
}

func TestDecodeStatusRestartsAMalformedAccount(t *testing.T) {
	for _, tc := range []struct{ name, goodput string }{
		{"negative", `{"since":"2026-01-01T00:00:00Z","asOf":"2026-01-01T00:00:00Z","total":{"training":-1}}`},
		{"backwards", `{"since":"2026-01-01T00:00:01Z","asOf":"2026-01-01T00:00:00Z"}`},
		{"cause", `{"since":"2026-01-01T00:00:00Z","asOf":"2026-01-01T00:00:00Z","now":"lunch"}`},
		{"type", `"97%"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := membership.DecodeStatus([]byte(`{"phase":"Running","generation":2,"updatedAt":"2026-01-01T10:00:00Z","goodput":` + tc.goodput + `}`))
			require.NoError(t, err, "the status stands")
			require.NotNil(t, s.Goodput)
			assert.Equal(t, time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC), s.Goodput.Since)
			assert.Contains(t, s.Goodput.Note, "the stored account was malformed")
			assert.NoError(t, s.Goodput.Validate())
		})
	}
}

func FuzzDecodeGoodput(f *testing.F) {
	fuzzDecoder(f, membership.DecodeGoodput,
		`{"since":"2026-01-01T00:00:00Z","asOf":"2026-01-01T00:01:10Z","now":"training","total":{"training":60,"restarting":10},"minutes":[{"start":"2026-01-01T00:00:00Z","seconds":{"training":60}},{"start":"2026-01-01T00:01:00Z","seconds":{"restarting":10}}],"generation":3,"trainingFrom":"2026-01-01T00:00:00Z","furthest":120,"stepTime":"20ms","owed":0.5}`,
		`{"since":"2026-01-01T00:00:00Z","asOf":"2026-01-01T00:00:00Z"}`)
}
