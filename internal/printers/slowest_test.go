package printers

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

func TestTheSlowestRankOfTheGenerationIsShown(t *testing.T) {
	step := func(d time.Duration, rank int) *membership.RankProgress {
		return &membership.RankProgress{Rank: rank, Step: 1234, StepTime: membership.Duration(d), HangTimeout: membership.Duration(5 * time.Second)}
	}
	nodes := []Node{
		{Node: "w-0", Generation: 3, Progress: step(20*time.Millisecond, 0)},
		{Node: "w-1", Generation: 3, Progress: step(310*time.Millisecond, 1)},
		{Node: "w-2", Generation: 2, Progress: step(time.Second, 2)}, // an earlier generation's
		{Node: "w-3", Generation: 3},
	}
	s := slowest(nodes, 3)
	require.NotNil(t, s)
	assert.Equal(t, Slowest{Node: "w-1", Rank: 1, Step: 1234, StepTime: 0.31, HangTimeout: 5}, *s)
	assert.Nil(t, slowest(nodes[3:], 3), "no progress reported: no line")

	var b strings.Builder
	WriteStatusTable(&b, Status{Slowest: s})
	assert.Contains(t, b.String(), "Slowest rank: rank 1 on node w-1, 310ms a step (median of its recent steps), at step 1234; hang timeout 5s\n")
}
