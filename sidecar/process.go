package sidecar

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/elastictraining/coordinator/launcher"
	"github.com/elastictraining/coordinator/membership"
)

// Processes runs a node's workload as real processes through a launcher.
type Processes struct {
	Launcher *launcher.Launcher
	// WithGloo sets PaddlePaddle's gloo variables.
	WithGloo bool
}

var _ Workload = (*Processes)(nil)

// Start implements Workload.
func (p *Processes) Start(_ context.Context, a Assignment) (<-chan Exit, error) {
	exits, err := p.Launcher.Start(TopologyOf(a, p.WithGloo))
	if err != nil {
		return nil, err
	}
	out := make(chan Exit, 1)
	go func() {
		defer close(out)
		for e := range exits {
			out <- Exit{Code: e.Code, Message: e.Message}
		}
	}()
	return out, nil
}

// Stop implements Workload.
func (p *Processes) Stop(ctx context.Context, grace time.Duration) error {
	return p.Launcher.Stop(ctx, grace)
}

// TopologyOf is what the processes of a member are told of its generation.
func TopologyOf(a Assignment, withGloo bool) launcher.Topology {
	p, m := a.Plan, a.Member
	t := launcher.Topology{
		JobID: a.Job, Generation: p.Generation, Restarts: p.Restarts, MaxRestarts: p.MaxRestarts,
		Role: string(m.Role), NodeRank: m.Rank, GlobalRankBase: m.GlobalRank,
		Host: m.Host, Ports: m.Ports, WithGloo: withGloo,
	}
	if host, port, err := net.SplitHostPort(p.Master); err == nil {
		t.MasterAddr = host
		t.MasterPort, _ = strconv.Atoi(port)
	}
	t.SchedulerHost, t.SchedulerPort = t.MasterAddr, t.MasterPort
	for _, o := range p.Members {
		switch o.Role {
		case membership.RoleWorker:
			t.TrainerEndpoints = append(t.TrainerEndpoints, o.Endpoints()...)
			t.TrainerHosts = append(t.TrainerHosts, o.Host)
		case membership.RolePS:
			t.PServerEndpoints = append(t.PServerEndpoints, o.Endpoints()[0])
		case membership.RoleScheduler:
			t.SchedulerHost, t.SchedulerPort = o.Host, o.Ports[0]
		}
		if o.Role == m.Role {
			t.NNodes++
			t.WorldSize += o.NProc
		}
	}
	return t
}
