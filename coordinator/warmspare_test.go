package coordinator_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

// A member that fails cold (its guard died with its warm interpreters)
// gives its rank to the warm spare, and is the spare; warm again, it takes
// the rank of the next member that fails cold.
func TestAColdMembersRankGoesToTheWarmSpare(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", nil)
	h.scale("job", "2")
	nodes := h.nodes("job", "n0", "n1", "n2")
	h.waitRunning("job", 2, 0)
	require.Equal(t, map[string]int{"n0": 0, "n1": 1}, h.ranks("job"))

	nodes[1].Workload.SetCold(true)
	require.True(t, nodes[1].Workload.Exit(137))
	st := h.waitRunning("job", 2, 1)
	assert.Equal(t, int64(2), st.Generation)
	assert.Equal(t, 1, st.Restarts, "the failure is charged as any other")
	assert.Equal(t, map[string]int{"n0": 0, "n2": 1}, h.ranks("job"), "the warm spare took the cold member's rank")

	nodes[1].Workload.SetCold(false)
	require.Eventually(t, func() bool {
		n, err := h.client.Nodes(t.Context(), "job")
		for _, x := range n {
			if x.ID == "n1" {
				return err == nil && !x.Cold
			}
		}
		return false
	}, 10*time.Second, 2*time.Millisecond, "the spare never said it is warm again")
	nodes[0].Workload.SetCold(true)
	require.True(t, nodes[0].Workload.Exit(137))
	h.waitRunning("job", 2, 2)
	assert.Equal(t, map[string]int{"n1": 0, "n2": 1}, h.ranks("job"), "the spare, warm again, took the next cold member's rank")
	st = h.waitStatus("job", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	assert.Equal(t, 2, st.Restarts)
}
