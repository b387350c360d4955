package coordinator

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/membership"
)

// The GenerationRunning event says how each rank began: the ranks are
// grouped by how, in rank order, and a cold start says why.
func TestBeganSaysHowEachRankBegan(t *testing.T) {
	running := func(id string, began ...string) membership.LiveNode {
		return membership.LiveNode{Node: membership.Node{ID: id, Role: membership.RoleWorker, State: membership.NodeRunning, Generation: 4, Began: began}}
	}
	ix := indexOf([]membership.LiveNode{
		running("a", "in place"),
		running("b", "started spare", "in place"),
		running("c", "cold: its started spare exited with code 1 before it reached elastic.run"),
		{Node: membership.Node{ID: "old", State: membership.NodeRunning, Generation: 3, Began: []string{"in place"}}},
	})
	p := membership.Plan{Generation: 4, Members: []membership.Member{
		{Node: "a", Role: membership.RoleWorker, GlobalRank: 0, NProc: 1},
		{Node: "b", Role: membership.RoleWorker, GlobalRank: 1, NProc: 2},
		{Node: "c", Role: membership.RoleWorker, GlobalRank: 3, NProc: 1},
		{Node: "old", Role: membership.RoleWorker, GlobalRank: 4, NProc: 1},
	}}
	assert.Equal(t, "in place: ranks 0, 2; started spare: rank 1; cold: rank 3 (its started spare exited with code 1 before it reached elastic.run)", beganText(p, ix))

	// Trainers that do not train in place say nothing.
	assert.Empty(t, beganText(p, indexOf([]membership.LiveNode{running("a"), running("b")})))
}
