package sidecar_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/sidecar"
	"github.com/elastictraining/coordinator/trainerenv"
)

func TestProcsOf(t *testing.T) {
	w0 := membership.Member{Node: "w0", Role: membership.RoleWorker, Rank: 0, GlobalRank: 0, Host: "10.0.0.1", Ports: []int{7000, 7001}, NProc: 2}
	w1 := membership.Member{Node: "w1", Role: membership.RoleWorker, Rank: 1, GlobalRank: 2, Host: "10.0.0.2", Ports: []int{7000, 7001}, NProc: 2}
	ps0 := membership.Member{Node: "p0", Role: membership.RolePS, Rank: 0, Host: "10.0.1.1", Ports: []int{8000}, NProc: 1}
	ps1 := membership.Member{Node: "p1", Role: membership.RolePS, Rank: 1, Host: "10.0.1.2", Ports: []int{8000}, NProc: 1}
	plan := membership.Plan{Generation: 4, Phase: membership.PhaseRun, Members: []membership.Member{w0, w1, ps0, ps1},
		WorldSize: 4, Master: "10.0.0.1:29500", Gloo: "10.0.1.1:29500", Restarts: 1, MaxRestarts: 3}

	worker := sidecar.ProcsOf(sidecar.Assignment{Job: "j", Plan: plan, Member: w1}, 0)
	assert.Equal(t, int64(4), worker.Generation)
	assert.Equal(t, "worker", worker.Role)
	assert.Equal(t, 1, worker.NodeRank)
	assert.Equal(t, 2, worker.GlobalRankBase)
	assert.Equal(t, 4, worker.WorldSize)
	n := trainerenv.Of("j", plan).Node(w1, 0)
	assert.Equal(t, [][]string{n.Env(0), n.Env(1)}, worker.Env, "one process per port, with trainerenv's environment")

	ps := sidecar.ProcsOf(sidecar.Assignment{Job: "j", Plan: plan, Member: ps1}, 2)
	assert.Equal(t, "ps", ps.Role)
	assert.Equal(t, 2, ps.WorldSize, "PS processes count within their role")
	assert.Equal(t, 1, ps.NodeRank)
	assert.Equal(t, [][]string{trainerenv.Of("j", plan).Node(ps1, 2).Env(0)}, ps.Env)
}
