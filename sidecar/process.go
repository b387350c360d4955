package sidecar

import (
	"context"
	"net"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/elastictraining/coordinator/launcher"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/trainerenv"
)

// Processes runs a node's workload as real processes through a launcher.
type Processes struct {
	Launcher *launcher.Launcher
	// Options say how the sidecar runs its processes: the framework, the
	// node's devices, gloo, the checkpoint store (trainerenv.Options).
	Options trainerenv.Options
	// Resolve, if set, looks a host name up: MindSpore takes only an IP
	// address in MS_SCHED_HOST (it parses it with inet_pton). Nil: the
	// system's resolver.
	Resolve func(ctx context.Context, host string) ([]net.IPAddr, error)
	// Logger, if set, hears of a name that did not resolve.
	Logger hclog.Logger
}

var _ Workload = (*Processes)(nil)

// Start implements Workload.
func (p *Processes) Start(ctx context.Context, a Assignment) (<-chan Exit, error) {
	procs := procsOf(a, p.Options, p.schedulerIP(ctx, a.Plan))
	exits, err := p.Launcher.Start(procs, a.Member.Lease)
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

// resolveFor bounds how long a start waits for the scheduler's name to
// resolve (a pod's DNS record comes a moment after the pod); after it the
// name is given as it is, and MindSpore's error says why.
const resolveFor = 5 * time.Second

// schedulerIP is the IP address of the plan's scheduler host, where the
// processes read MindSpore's variables and the host is a name; "" where
// there is nothing to resolve.
func (p *Processes) schedulerIP(ctx context.Context, plan membership.Plan) string {
	if p.Options.Framework != trainerenv.AnyFramework && p.Options.Framework != trainerenv.MindSpore {
		return ""
	}
	if !slices.ContainsFunc(plan.Members, func(m membership.Member) bool { return m.Role == membership.RoleScheduler }) {
		return "" // no MindSpore scheduler: nothing reads it
	}
	host := plan.Endpoints().SchedulerAddr
	if host == "" || net.ParseIP(host) != nil {
		return ""
	}
	resolve := p.Resolve
	if resolve == nil {
		resolve = net.DefaultResolver.LookupIPAddr
	}
	ctx, cancel := context.WithTimeout(ctx, resolveFor)
	defer cancel()
	for {
		addrs, err := resolve(ctx, host)
		if err == nil && len(addrs) > 0 {
			for _, a := range addrs {
				if a.IP.To4() != nil {
					return a.IP.String()
				}
			}
			return addrs[0].IP.String()
		}
		select {
		case <-ctx.Done():
			if p.Logger != nil {
				p.Logger.Warn("the scheduler's host name did not resolve; MS_SCHED_HOST is the name, which MindSpore cannot parse",
					"host", host, "error", err)
			}
			return ""
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop implements Workload.
func (p *Processes) Stop(ctx context.Context, grace time.Duration) error {
	return p.Launcher.Stop(ctx, grace)
}

// Pids implements Workload.
func (p *Processes) Pids() []int { return p.Launcher.Pids() }

// Kill implements Workload.
func (p *Processes) Kill(ctx context.Context) error { return p.Launcher.Kill(ctx) }

// SetDeadline implements Workload.
func (p *Processes) SetDeadline(lease int64, at time.Time) {
	// A guard that cannot be told is killed by the launcher's next call;
	// its deadline is the last one it was given.
	_ = p.Launcher.SetDeadline(lease, at)
}

// ProcsOf is what the launcher starts for a member of a sidecar with gloo
// level gloo and no other option: one process per port, each with the
// environment package trainerenv gives it.
func ProcsOf(a Assignment, gloo int) launcher.Procs {
	return procsOf(a, trainerenv.Options{Gloo: gloo}, "")
}

// procsOf is what the launcher starts for a member: a process per port, or
// one for a framework's launcher, which starts them. schedIP, if set,
// replaces the scheduler's host name.
func procsOf(a Assignment, o trainerenv.Options, schedIP string) launcher.Procs {
	n := trainerenv.Of(a.Job, a.Plan).NodeWith(a.Member, o)
	if schedIP != "" {
		n.Endpoints.SchedulerAddr = schedIP
	}
	m := a.Member
	p := launcher.Procs{Generation: n.Number, Role: string(m.Role), NodeRank: m.Rank, GlobalRankBase: m.GlobalRank,
		WorldSize: n.WorldSize(), Env: make([][]string, n.Processes())}
	for local := range p.Env {
		p.Env[local] = n.Env(local)
	}
	return p
}
