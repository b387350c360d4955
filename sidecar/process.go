package sidecar

import (
	"context"
	"time"

	"github.com/elastictraining/coordinator/launcher"
)

// Processes runs a node's workload as real processes through a launcher.
type Processes struct {
	Launcher *launcher.Launcher
	// Gloo is PaddlePaddle's gloo level (launcher.Topology.Gloo).
	Gloo int
}

var _ Workload = (*Processes)(nil)

// Start implements Workload.
func (p *Processes) Start(_ context.Context, a Assignment) (<-chan Exit, error) {
	exits, err := p.Launcher.Start(TopologyOf(a, p.Gloo), a.Member.Lease)
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

// Kill implements Workload.
func (p *Processes) Kill(ctx context.Context) error { return p.Launcher.Kill(ctx) }

// SetDeadline implements Workload.
func (p *Processes) SetDeadline(lease int64, at time.Time) {
	// A guard that cannot be told is killed by the launcher's next call;
	// its deadline is the last one it was given.
	_ = p.Launcher.SetDeadline(lease, at)
}

// TopologyOf is what the processes of a member are told of its generation.
func TopologyOf(a Assignment, gloo int) launcher.Topology {
	p, m := a.Plan, a.Member
	e := p.Endpoints()
	return launcher.Topology{
		JobID: a.Job, Generation: p.Generation, Restarts: p.Restarts, MaxRestarts: p.MaxRestarts,
		Role: string(m.Role), NodeRank: m.Rank, NNodes: e.Nodes[m.Role], GlobalRankBase: m.GlobalRank,
		WorldSize: e.Processes[m.Role], Host: m.Host, Ports: m.Ports,
		MasterAddr: e.MasterAddr, MasterPort: e.MasterPort,
		TrainerEndpoints: e.Trainers, TrainerHosts: e.TrainerHosts, PServerEndpoints: e.PServers, HeterEndpoints: e.Heters,
		SchedulerHost: e.SchedulerAddr, SchedulerPort: e.SchedulerPort, Gloo: gloo, GlooEndpoint: e.Gloo,
	}
}
