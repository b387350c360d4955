package printers

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/membership"
)

// A spare whose warm interpreters are not ready is shown cold, and not
// counted among the warm ones.
func TestStatusShowsAColdSpare(t *testing.T) {
	r0, r1 := 0, 1
	v := Status{Spares: 2, Nodes: []Node{
		{Node: "w0", Role: membership.RoleWorker, Rank: &r0, State: membership.NodeRunning},
		{Node: "w2", Role: membership.RoleWorker, Rank: &r1, State: membership.NodeRunning},
		{Node: "w1", Role: membership.RoleWorker, State: membership.NodeStopped, Cold: true},
		{Node: "w3", Role: membership.RoleWorker, State: membership.NodeWaiting},
	}}
	var b strings.Builder
	WriteStatusTable(&b, v)
	out := b.String()
	assert.Contains(t, out, "Spares: 1 of 2 registered and warm, holding no rank; 1 more registered, cold\n")
	assert.Regexp(t, `w1\s+worker\s+spare \(cold\)\s`, out)
	assert.Regexp(t, `w3\s+worker\s+spare\s`, out)
}
