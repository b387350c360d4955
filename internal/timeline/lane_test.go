package timeline_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/timeline"
	"github.com/elastictraining/coordinator/membership"
)

func TestActivityFollowsTheGenerations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
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
	spans := timeline.Activity(events, at(30))
	assert.Equal(t, []timeline.Span{
		{Cause: membership.CauseRestarting, From: at(0), To: at(1)},
		{Cause: membership.CauseTraining, From: at(1), To: at(10)},
		{Cause: membership.CauseRestarting, From: at(10), To: at(12)},
		{Cause: membership.CauseTraining, From: at(12), To: at(20)},
		{Cause: membership.CauseHung, From: at(20), To: at(21)},
		{Cause: membership.CauseRestarting, From: at(21), To: at(23)},
		{Cause: membership.CauseTraining, From: at(23), To: at(30)},
	}, spans)

	var svg bytes.Buffer
	require.NoError(t, timeline.Plot(&svg, ".svg", "job j", events))
	assert.Contains(t, svg.String(), "what the job did")
}
