package sidecar

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/elastictraining/coordinator/guard"
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

	// observations carries what the guard's watch found (Observe) to the
	// agent; base is the running generation's first global rank.
	obsOnce      sync.Once
	observations chan Observation
	base         atomic.Int64
	// marks are the ranks' step marks of the generation started last
	// (marks.go).
	marks rankMarks
}

var (
	_ Workload = (*Processes)(nil)
	_ Watcher  = (*Processes)(nil)
	_ Marker   = (*Processes)(nil)
	_ Warmer   = (*Processes)(nil)
)

// Observations implements Watcher.
func (p *Processes) Observations() <-chan Observation { return p.channel() }

func (p *Processes) channel() chan Observation {
	p.obsOnce.Do(func() { p.observations = make(chan Observation, 16) })
	return p.observations
}

// StopStacks implements Watcher.
func (p *Processes) StopStacks(ctx context.Context) error { return p.Launcher.StopStacks(ctx) }

// Observe hands a guard's report of a hang or of the ranks' progress to
// the agent (the launcher's OnHung and OnProgress). It never blocks: a
// progress report that finds the channel full is dropped, as the next one
// says the same; a hang is kept.
func (p *Processes) Observe(rep guard.Report) {
	ch := p.channel()
	base := int(p.base.Load())
	o := Observation{Generation: rep.Generation}
	switch rep.Event {
	case guard.EventHung:
		h := &membership.Hang{Generation: rep.Generation, Rank: rep.Rank - base, Step: rep.Step, Counted: rep.Counted,
			Quiet: membership.Duration(rep.QuietNanos), Timeout: membership.Duration(rep.TimeoutNanos), Stopped: rep.Stopped}
		if rep.LastActivityUnixNanos != 0 {
			h.LastActivity = time.Unix(0, rep.LastActivityUnixNanos).UTC()
		}
		o.Hung = h
		go func() { ch <- o }() // at most one a rank a generation
		return
	case guard.EventProgress:
		p.marks.observe(rep)
		if rep.Final {
			return // the ranks are gone: only their marks are news
		}
		for _, r := range rep.Progress {
			o.Steps = append(o.Steps, membership.RankProgress{Rank: r.Rank - base, Step: r.Step, Counted: r.Counted,
				StepTime: membership.Duration(r.IntervalNanos), HangTimeout: membership.Duration(rep.TimeoutNanos)})
			if q := time.Unix(0, r.QuietUntilUnixNanos).UTC(); r.QuietUntilUnixNanos != 0 && q.After(o.QuietUntil) {
				o.QuietUntil = q
			}
			if !r.Hung {
				o.Stepping = append(o.Stepping, r.Rank-base)
			}
		}
	default:
		return
	}
	select {
	case ch <- o:
	default:
	}
}

// Start implements Workload.
func (p *Processes) Start(ctx context.Context, a Assignment) (<-chan Exit, error) {
	procs := procsOf(a, p.Options, p.schedulerIP(ctx, a.Plan))
	p.base.Store(int64(procs.GlobalRankBase))
	p.marks.start(a.Plan.Generation, a.Member.NProc)
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

// Cold implements Warmer.
func (p *Processes) Cold() (bool, <-chan struct{}) { return p.Launcher.Cold() }

// InPlace implements InPlacer.
func (p *Processes) InPlace() bool { return p.Launcher.InPlace() }

// Began implements InPlacer.
func (p *Processes) Began() []string { return p.Launcher.Began() }

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
	p.Watch = watchOf(a.Plan.Watch)
	return p
}

// watchOf is the guard's watch of a plan's ranks: nil (none) when the plan
// asks for none; an unset timeout is learned, an unset start-up budget the
// default.
func watchOf(w *membership.HangWatch) *guard.Watch {
	if w == nil {
		return nil
	}
	out := &guard.Watch{TimeoutNanos: guard.WatchLearned, StartupNanos: guard.WatchLearned, AtLeastNanos: int64(w.AtLeast), Expect: w.Expect}
	if w.Timeout != nil {
		out.TimeoutNanos = int64(*w.Timeout)
	}
	if w.Startup != nil {
		out.StartupNanos = int64(*w.Startup)
	}
	return out
}
