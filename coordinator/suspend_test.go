package coordinator_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

// TestASuspendedJobStopsGracefullyHoldsNoRanksAndResumes: Suspend stops
// the running generation as a change of membership does — every member
// stops and acks, under the lease it holds, charged nothing — and starts
// none, not even for a node that joins meanwhile; cleared, the job starts
// its next generation on every node there.
func TestASuspendedJobStopsGracefullyHoldsNoRanksAndResumes(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", nil)
	spec := membership.DefaultSpec(membership.NP{Min: 2, Max: 3})
	h.setSpec("s", spec)
	nodes := h.nodes("s", "n0", "n1")
	h.waitRunning("s", 2, 0)
	leases := map[string]int64{}
	for _, n := range nodes {
		a, ok := n.Workload.Running()
		require.True(t, ok)
		leases[n.ID] = a.Member.Lease
	}

	spec.Suspend = true
	h.setSpec("s", spec)
	st := h.waitStatus("s", "Suspended", func(s membership.Status) bool { return s.Phase == membership.JobSuspended })
	assert.Equal(t, "suspended: generation 1 stopped; the job resumes from its saved state when the suspension is lifted", st.Message)
	assert.Zero(t, st.Interruptions, "a suspension is no fault")
	assert.Zero(t, st.Restarts, "nor does it spend the restart budget")
	waitStopped(t, nodes...)
	for _, n := range nodes {
		reg := n.Registration()
		assert.Equal(t, leases[n.ID], int64(reg.Lease()), "node %s stopped gracefully, keeping its lease", n.ID)
	}
	late := h.node("s", "n2")
	time.Sleep(500 * time.Millisecond) // longer than the harness's settle window
	for _, n := range append(nodes, late) {
		_, running := n.Workload.Running()
		assert.False(t, running, "node %s runs nothing while the job is suspended", n.ID)
	}
	st = h.waitStatus("s", "the suspension in the goodput account", func(s membership.Status) bool {
		return s.Goodput != nil && s.Goodput.Now == membership.CauseSuspended
	})
	assert.Equal(t, membership.JobSuspended, st.Phase)
	assert.Equal(t, 3, st.Ready, "the workers there are counted")

	spec.Suspend = false
	h.setSpec("s", spec)
	st = h.waitRunning("s", 3, 1)
	assert.Equal(t, int64(2), st.Generation)
	assert.Zero(t, st.Interruptions)
	assert.Equal(t, "resumed: the job is no longer suspended", h.plan("s").Reason)
	assert.Greater(t, st.Goodput.Total.Suspended, 0.0, "the time suspended is accounted as such")
	for _, n := range nodes {
		assert.Equal(t, []int64{1, 2}, generations(n), "node %s", n.ID)
	}
}

// TestASuspensionEvictsAMemberThatDoesNotStop: a member that never acks
// the stop (its trainer ignores SIGTERM, its node frozen) is evicted after
// the stop timeout as at any stop, and the job is suspended without it.
func TestASuspensionEvictsAMemberThatDoesNotStop(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", nil)
	spec := membership.DefaultSpec(membership.NP{Min: 2, Max: 2})
	h.setSpec("s", spec)
	nodes := h.nodes("s", "n0", "n1")
	h.waitRunning("s", 2, 0)
	release := nodes[1].Workload.Hang()
	defer release()

	spec.Suspend = true
	h.setSpec("s", spec)
	st := h.waitStatus("s", "Suspended", func(s membership.Status) bool { return s.Phase == membership.JobSuspended })
	assert.Contains(t, h.eventTypes("s"), "NodeEvicted")
	assert.Zero(t, st.Interruptions)
}
