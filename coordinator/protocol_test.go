package coordinator_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJoinThenRun(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", nil)
	h.scale("job", "3")
	nodes := h.nodes("job", "n0", "n1", "n2")

	st := h.waitRunning("job", 3, 0)
	assert.Equal(t, int64(1), st.Generation)
	assert.Equal(t, 3, st.WorldSize)
	require.NotNil(t, st.Steps)

	assert.Equal(t, map[string]int{"n0": 0, "n1": 1, "n2": 2}, h.ranks("job"), "ranks follow join order")
	for _, n := range nodes {
		a, ok := n.Workload.Running()
		require.True(t, ok, "node %s runs", n.ID)
		assert.Equal(t, int64(1), a.Plan.Generation)
		assert.Equal(t, 3, a.Plan.WorldSize)
	}
}
