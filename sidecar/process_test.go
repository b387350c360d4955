package sidecar_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/sidecar"
)

func TestTopologyOf(t *testing.T) {
	w0 := membership.Member{Node: "w0", Role: membership.RoleWorker, Rank: 0, GlobalRank: 0, Host: "10.0.0.1", Ports: []int{7000, 7001}, NProc: 2}
	w1 := membership.Member{Node: "w1", Role: membership.RoleWorker, Rank: 1, GlobalRank: 2, Host: "10.0.0.2", Ports: []int{7000, 7001}, NProc: 2}
	ps0 := membership.Member{Node: "p0", Role: membership.RolePS, Rank: 0, Host: "10.0.1.1", Ports: []int{8000}, NProc: 1}
	ps1 := membership.Member{Node: "p1", Role: membership.RolePS, Rank: 1, Host: "10.0.1.2", Ports: []int{8000}, NProc: 1}
	plan := membership.Plan{Generation: 4, Phase: membership.PhaseRun, Members: []membership.Member{w0, w1, ps0, ps1},
		WorldSize: 4, Master: "10.0.0.1:29500", Gloo: "10.0.1.1:29500", Restarts: 1, MaxRestarts: 3}

	worker := sidecar.TopologyOf(sidecar.Assignment{Job: "j", Plan: plan, Member: w1}, 0)
	assert.Equal(t, 1, worker.NodeRank)
	assert.Equal(t, 2, worker.NNodes)
	assert.Equal(t, 2, worker.GlobalRankBase)
	assert.Equal(t, 4, worker.WorldSize)
	assert.Equal(t, []string{"10.0.0.1:7000", "10.0.0.1:7001", "10.0.0.2:7000", "10.0.0.2:7001"}, worker.TrainerEndpoints)
	assert.Equal(t, []string{"10.0.0.1", "10.0.0.2"}, worker.TrainerHosts)
	assert.Equal(t, []string{"10.0.1.1:8000", "10.0.1.2:8000"}, worker.PServerEndpoints)
	assert.Equal(t, "10.0.0.1", worker.MasterAddr)
	assert.Equal(t, 29500, worker.MasterPort)
	assert.Equal(t, "10.0.0.1", worker.SchedulerHost, "no scheduler node: the master")

	ps := sidecar.TopologyOf(sidecar.Assignment{Job: "j", Plan: plan, Member: ps1}, 2)
	assert.Equal(t, 2, ps.Gloo)
	assert.Equal(t, "10.0.1.1:29500", ps.GlooEndpoint, "the first server's store")
	assert.Equal(t, 2, ps.NNodes)
	assert.Equal(t, 2, ps.WorldSize, "PS processes count within their role")
	assert.Equal(t, 1, ps.NodeRank)
}
