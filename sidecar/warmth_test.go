package sidecar_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/membership"
)

// The node's record says whether its next start would be cold: written
// as it changes while the node runs nothing, and with the acks of a
// generation's end and of a stop, which the leader places the next
// generation by.
func TestAgentSaysWhetherItsNextStartIsCold(t *testing.T) {
	f := newFixture(t)
	lease := int64(f.node.Registration().Lease())
	n := f.record("registered", func(membership.Node) bool { return true })
	assert.False(t, n.Cold, "a workload warm from the start")

	// A spare whose guard died, then whose new guard's interpreters are
	// ready.
	f.node.Workload.SetCold(true)
	f.record("cold", func(n membership.Node) bool { return n.Cold && n.State == membership.NodeWaiting })
	f.node.Workload.SetCold(false)
	f.record("warm again", func(n membership.Node) bool { return !n.Cold })

	f.putPlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{f.member(lease)}, WorldSize: 1, Master: "127.0.0.1:20000"})
	f.record("acked running 1", func(n membership.Node) bool { return n.State == membership.NodeRunning && n.Generation == 1 })
	// Its guard dies: the failure it reports says its next start is cold.
	f.node.Workload.SetCold(true)
	f.node.Workload.Exit(137)
	n = f.record("reported the failure", func(n membership.Node) bool { return n.State == membership.NodeFailed })
	assert.True(t, n.Cold, "the failure's ack says the node is cold")

	f.putPlan(membership.Plan{Generation: 2, Phase: membership.PhaseStop, Members: []membership.Member{f.member(lease)}})
	n = f.record("acked stopped 2", func(n membership.Node) bool { return n.State == membership.NodeStopped && n.Generation == 2 })
	assert.True(t, n.Cold, "the stop's ack says the node is cold")
	f.node.Workload.SetCold(false)
	f.record("warm again, stopped", func(n membership.Node) bool { return !n.Cold && n.State == membership.NodeStopped })
}
