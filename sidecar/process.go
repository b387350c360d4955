package sidecar

import (
	"context"
	"time"

	"github.com/elastictraining/coordinator/launcher"
	"github.com/elastictraining/coordinator/trainerenv"
)

// Processes runs a node's workload as real processes through a launcher.
type Processes struct {
	Launcher *launcher.Launcher
	// Gloo is PaddlePaddle's gloo level (trainerenv.Node.Gloo).
	Gloo int
	// Checkpoint is where the processes find the sidecar's checkpoint
	// store (trainerenv.Node.Checkpoint); none if empty.
	Checkpoint trainerenv.Checkpoint
}

var _ Workload = (*Processes)(nil)

// Start implements Workload.
func (p *Processes) Start(_ context.Context, a Assignment) (<-chan Exit, error) {
	exits, err := p.Launcher.Start(procsOf(a, p.Gloo, p.Checkpoint), a.Member.Lease)
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

// ProcsOf is what the launcher starts for a member: one process per port,
// each with the environment package trainerenv gives it.
func ProcsOf(a Assignment, gloo int) launcher.Procs {
	return procsOf(a, gloo, trainerenv.Checkpoint{})
}

func procsOf(a Assignment, gloo int, ckpt trainerenv.Checkpoint) launcher.Procs {
	n := trainerenv.Of(a.Job, a.Plan).Node(a.Member, gloo)
	n.Checkpoint = ckpt
	m := a.Member
	p := launcher.Procs{Generation: n.Number, Role: string(m.Role), NodeRank: m.Rank, GlobalRankBase: m.GlobalRank,
		WorldSize: n.WorldSize(), Env: make([][]string, len(m.Ports))}
	for local := range p.Env {
		p.Env[local] = n.Env(local)
	}
	return p
}
