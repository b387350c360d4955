package sidecar

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/trainerenv"
)

// TestTheSchedulersNameBecomesItsIP: MindSpore parses MS_SCHED_HOST with
// inet_pton, so a scheduler known by name (--intranet Service) is given
// by its address; a process of another framework is not held up for it.
func TestTheSchedulersNameBecomesItsIP(t *testing.T) {
	plan := membership.Plan{Generation: 2, Phase: membership.PhaseRun, WorldSize: 1, Master: "w0.ns.svc:29500", Members: []membership.Member{
		{Node: "s0", Role: membership.RoleScheduler, Host: "s0.ns.svc", Ports: []int{2222}, NProc: 1},
		{Node: "w0", Role: membership.RoleWorker, Host: "w0.ns.svc", Ports: []int{7000}, NProc: 1},
	}}
	looked := 0
	resolve := func(_ context.Context, host string) ([]net.IPAddr, error) {
		looked++
		if host == "s0.ns.svc" {
			return []net.IPAddr{{IP: net.ParseIP("fd00::9")}, {IP: net.ParseIP("10.1.0.9")}}, nil
		}
		return nil, errors.New("no such host")
	}
	for fw, want := range map[trainerenv.Framework]string{trainerenv.MindSpore: "10.1.0.9", trainerenv.AnyFramework: "10.1.0.9", trainerenv.PyTorch: ""} {
		p := &Processes{Options: trainerenv.Options{Framework: fw}, Resolve: resolve}
		assert.Equal(t, want, p.schedulerIP(t.Context(), plan), "framework %s: an IPv4 address first", fw)
		procs := procsOf(Assignment{Job: "ms", Plan: plan, Member: plan.Members[1]}, p.Options, p.schedulerIP(t.Context(), plan))
		if want != "" {
			assert.Contains(t, procs.Env[0], "MS_SCHED_HOST="+want)
		}
	}
	plan.Members[0].Host = "10.1.0.7"
	looked = 0
	p := &Processes{Options: trainerenv.Options{Framework: trainerenv.MindSpore}, Resolve: resolve}
	assert.Empty(t, p.schedulerIP(t.Context(), plan), "an address already")
	assert.Zero(t, looked)
}
