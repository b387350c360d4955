package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/autoscale"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge/controller"
)

// Config configures an Autoscaler. Its Namespace is where the jobs it
// resizes live; "" is every namespace. Nodes and pods are watched in the
// whole cluster either way: they all take room on the nodes (a ClusterRole
// to read them).
type Config struct {
	controller.Clients
	Policy autoscale.Config
	// Period is the backstop: a pass at least this often; 30 s if zero.
	// Passes follow changes of nodes, pods and jobs.
	Period time.Duration
	// Batch is how long a pass waits after the change that prompted it,
	// to take in the ones that come with it; 200 ms if zero.
	Batch time.Duration
	// Settle is how long the decisions that can wait (growth, giving up
	// workers that cannot be placed) must stay the same before they are
	// carried out (autoscale.Settler); zero carries them out at once.
	// MaxSettle is the most they wait; 15 s if zero.
	Settle, MaxSettle time.Duration
	// DeletionCost has the autoscaler set the deletion cost of other
	// workloads' ReplicaSet pods, so that their scale-downs free room for
	// whole workers rather than holes too small for one
	// (autoscale.DeletionCosts). It needs patch on pods.
	DeletionCost bool
	// Registerer receives the autoscaler's metrics; none if nil.
	Registerer prometheus.Registerer
}

// Autoscaler is the leader task that resizes elastic jobs.
type Autoscaler struct {
	cfg     Config
	policy  *autoscale.Policy
	logger  hclog.Logger
	metrics *metrics

	// changed is when each job's target last changed, as this process saw
	// it; it outlives terms, so that a new term does not regrow a job at
	// once. A failover to another replica forgets it: one cooldown lost.
	mu      sync.Mutex
	changed map[string]time.Time
	seen    map[string]int // each job's target when last seen
	// wrote is each job's target as last set here, until the records
	// show it: a resource's replicas reach the spec through its
	// controller, a moment later, and a pass in between must not decide
	// again from the old target.
	wrote map[string]written
}

// written is a target set, and when.
type written struct {
	target int
	at     time.Time
}

// writeSettle bounds how long a target set here is preferred to the one
// the records show; past it, someone else changed the job meanwhile.
const writeSettle = 10 * time.Second

// New validates cfg and fills its defaults.
func New(cfg Config) (*Autoscaler, error) {
	if err := cfg.Complete(); err != nil {
		return nil, fmt.Errorf("autoscaler: %w", err)
	}
	if cfg.Period == 0 {
		cfg.Period = 30 * time.Second
	}
	if cfg.Batch == 0 {
		cfg.Batch = 200 * time.Millisecond
	}
	if cfg.MaxSettle == 0 {
		cfg.MaxSettle = 15 * time.Second
	}
	if cfg.Period < 0 || cfg.Batch < 0 || cfg.Settle < 0 || cfg.MaxSettle < 0 {
		return nil, errors.New("autoscaler: period, batch and settle must not be negative")
	}
	policy, err := autoscale.New(cfg.Policy)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	cfg.Logger = cfg.Logger.Named("autoscaler")
	return &Autoscaler{cfg: cfg, policy: policy, logger: cfg.Logger, metrics: m,
		changed: map[string]time.Time{}, seen: map[string]int{}, wrote: map[string]written{}}, nil
}

// Lead resizes jobs until ctx ends.
func (a *Autoscaler) Lead(ctx context.Context) error {
	t := &term{
		Autoscaler: a,
		Term:       controller.StartTerm(ctx, a.cfg.Clients, "elastic-autoscaler"),
		kick:       make(chan struct{}, 1),
		records: &controller.Records{Kinds: []membership.KeyKind{membership.KindSpec, membership.KindStatus},
			Drop: func(j *membership.JobRecords) bool { return j.Spec == nil && j.Status == nil }},
		reported:    map[string]membership.AutoscalerStatus{},
		leftToKueue: map[string]bool{},
		settler:     autoscale.NewSettler(a.cfg.Settle, a.cfg.MaxSettle),
	}
	defer t.Stop()
	return t.run(ctx)
}

// term is one leadership term of the autoscaler. It has no queue: each
// pass decides over the whole cluster.
type term struct {
	*Autoscaler
	*controller.Term
	kick chan struct{}

	factory informers.SharedInformerFactory
	nodes   cache.SharedIndexInformer
	pods    cache.SharedIndexInformer
	loads   *workloads
	settler *autoscale.Settler // of this term: nothing held in another carries over
	wake    *time.Timer        // a pass when held decisions are due or an expectation lapses
	steerer *costSteerer       // nil without Config.DeletionCost
	records *controller.Records

	// Owned by the pass loop.
	reported map[string]membership.AutoscalerStatus
	// leftToKueue are the jobs said to be Kueue's to size.
	leftToKueue map[string]bool
}

func (t *term) poke() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

func (t *term) run(ctx context.Context) error {
	t.factory = informers.NewSharedInformerFactory(t.cfg.Kube, 0)
	t.nodes = t.factory.Core().V1().Nodes().Informer()
	t.pods = t.factory.Core().V1().Pods().Informer()
	for _, inf := range []cache.SharedIndexInformer{t.nodes, t.pods} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { t.poke() },
			UpdateFunc: func(old, obj any) { t.roomChanged(old, obj) },
			DeleteFunc: func(any) { t.poke() },
		}); err != nil {
			return err
		}
	}
	t.loads = newWorkloads(ctx, t.cfg.Kube, t.factory, t.poke, t.logger.Warn)
	t.factory.Start(ctx.Done())
	defer t.factory.Shutdown()
	defer func() {
		if t.wake != nil {
			t.wake.Stop()
		}
	}()

	// A spec or status that changes pokes a pass.
	t.Follow(ctx, t.records, func(u controller.Update) {
		if u.Reset || len(u.Changes) > 0 {
			t.poke()
		}
	})
	if t.cfg.DeletionCost {
		t.steerer = newCostSteerer(t.cfg.Kube, t.pods.GetStore(), t.logger, t.metrics.costs)
		t.Go(func() { t.steerer.run(ctx) })
	}
	defer t.Wait()

	if !cache.WaitForCacheSync(ctx.Done(), append([]cache.InformerSynced{t.nodes.HasSynced, t.pods.HasSynced}, t.loads.synced()...)...) {
		return ctx.Err()
	}
	t.logger.Info("autoscaling", "namespace", controller.NamespaceName(t.cfg.Namespace), "cooldown", t.policy.Config().Cooldown)
	backstop := time.NewTicker(t.cfg.Period)
	defer backstop.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.kick:
		case <-backstop.C:
		}
		// Take in what comes with the change, then decide once.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(t.cfg.Batch):
		}
		select {
		case <-t.kick:
		default:
		}
		t.pass(ctx)
	}
}

// roomChanged pokes for an update that can change the room on the nodes: a
// pod bound, started, finished or being deleted; a node's capacity or
// readiness. Status heartbeats of nodes change nothing.
func (t *term) roomChanged(old, obj any) {
	switch o := obj.(type) {
	case *corev1.Pod:
		p, ok := old.(*corev1.Pod)
		if !ok || p.Spec.NodeName != o.Spec.NodeName || p.Status.Phase != o.Status.Phase ||
			p.Status.NominatedNodeName != o.Status.NominatedNodeName || (p.DeletionTimestamp == nil) != (o.DeletionTimestamp == nil) {
			t.poke()
		}
	case *corev1.Node:
		n, ok := old.(*corev1.Node)
		if !ok || n.Spec.Unschedulable != o.Spec.Unschedulable || ready(n) != ready(o) ||
			!equalResources(n.Status.Allocatable, o.Status.Allocatable) {
			t.poke()
		}
	}
}

func equalResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, q := range a {
		if r, ok := b[k]; !ok || q.Cmp(r) != 0 {
			return false
		}
	}
	return true
}

// candidates are the jobs the autoscaler may resize: a worker range, not
// finished, and a target it can set (a resource that owns the job must
// keep its bounds apart from its replicas: ElasticJob's maxReplicas,
// PaddleJob's limits).
func (t *term) candidates() map[string]candidate {
	out := map[string]candidate{}
	t.records.Each(func(id string, j *membership.JobRecords) {
		s := j.Spec
		if s == nil || !s.NP.IsRange() || (j.Status != nil && j.Status.Phase.Done()) {
			return
		}
		if s.Queue != "" {
			// Kueue admits the job at a size of its quota's choosing.
			if !t.leftToKueue[id] {
				t.leftToKueue[id] = true
				t.logger.Info("job left to Kueue: its LocalQueue's admission sets its size", "job", id, "queue", s.Queue)
			}
			return
		}
		c := candidate{id: id, spec: *s, created: j.SpecCreated}
		if s.Owner != "" {
			o, ok := jobv1.ParseOwner(s.Owner)
			if _, known := jobv1.JobKindNamed(o.Kind); !ok || !known || s.Target == 0 {
				return
			}
			if t.cfg.Namespace != "" && o.Namespace != t.cfg.Namespace {
				return
			}
			c.owner = o
		}
		out[id] = c
	})
	return out
}

// pass decides once and carries the decisions out.
func (t *term) pass(ctx context.Context) {
	t.metrics.passes.Inc()
	now := time.Now()
	nodes := listAs[*corev1.Node](t.nodes)
	pods := listAs[*corev1.Pod](t.pods)
	controllers := t.loads.snapshot()
	expected, lapses := controllers.expected(pods, now)
	candidates := t.candidates()
	holds := controllers.roomKeeper(pods, candidates, now)
	v := buildView(nodes, append(pods, expected...), candidates, holds)
	if t.cfg.Namespace != "" {
		for id, j := range v.jobs {
			if j.namespace != t.cfg.Namespace {
				delete(v.jobs, id)
			}
		}
		v.snapshot.Jobs = filterJobs(v.snapshot.Jobs, v.jobs)
	}
	for i := range v.snapshot.Jobs {
		j := &v.snapshot.Jobs[i]
		j.Target, j.Changed = t.sawTarget(j.ID, j.Target, now)
	}
	if t.steerer != nil {
		if worker, eligible, ok := autoscale.GrowthWorker(v.snapshot.Jobs); ok {
			t.steerer.wish(autoscale.DeletionCosts(v.snapshot.Nodes, replicaPods(pods), worker, eligible))
		}
	}
	plan := t.policy.Decide(v.snapshot, now)
	act, due := t.settler.Filter(plan, now)
	if t.wake != nil {
		t.wake.Stop()
	}
	if due.IsZero() || (!lapses.IsZero() && lapses.Before(due)) {
		due = lapses
	}
	if !due.IsZero() {
		t.wake = time.AfterFunc(max(due.Sub(now), 0), t.poke)
	}

	t.metrics.utilization.Set(v.utilization)
	t.metrics.pending.Set(float64(countOthers(v.snapshot.Pending)))
	decided := map[string]autoscale.Decision{}
	for _, d := range act {
		writeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := t.apply(writeCtx, v.jobs[d.Job], d.To)
		cancel()
		if err != nil {
			if !errors.Is(err, membership.ErrTargetMoot) {
				t.metrics.failures.Inc()
				t.logger.Warn("could not resize job", "job", d.Job, "from", d.From, "to", d.To, "error", err)
			}
			continue
		}
		decided[d.Job] = d
		t.wroteTarget(d.Job, d.To, now)
		direction := "grow"
		if d.To < d.From {
			direction = "shrink"
		}
		t.metrics.decisions.WithLabelValues(d.Job, direction).Inc()
		t.logger.Info("resized job", "job", d.Job, "from", d.From, "to", d.To, "reason", d.Reason)
		if ref := t.eventRef(v.jobs[d.Job]); ref != nil {
			t.Recorder.Eventf(ref, corev1.EventTypeNormal, "Autoscaled", "workers %d → %d: %s", d.From, d.To, d.Reason)
		}
	}
	t.report(ctx, v, plan, decided, now)
}

// sawTarget notes a job's target as the records show it at now, and
// returns the target to decide from (one set here that the records do not
// show yet) and when it last changed: a change made by someone else
// (kubectl scale) starts the cooldown too.
func (a *Autoscaler) sawTarget(job string, target int, now time.Time) (int, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w, ok := a.wrote[job]; ok {
		if w.target != target && now.Sub(w.at) < writeSettle {
			return w.target, a.changed[job]
		}
		delete(a.wrote, job)
	}
	if seen, ok := a.seen[job]; ok && seen != target {
		a.changed[job] = now
	}
	a.seen[job] = target
	return target, a.changed[job]
}

// wroteTarget notes a target set here.
func (a *Autoscaler) wroteTarget(job string, target int, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wrote[job] = written{target: target, at: now}
	a.seen[job] = target
	a.changed[job] = now
}

func filterJobs(jobs []autoscale.Job, keep map[string]*jobView) []autoscale.Job {
	out := jobs[:0]
	for _, j := range jobs {
		if keep[j.ID] != nil {
			out = append(out, j)
		}
	}
	return out
}

func countOthers(pending []autoscale.Pod) int {
	n := 0
	for _, p := range pending {
		if p.Job == "" {
			n++
		}
	}
	return n
}

func listAs[T any](inf cache.SharedIndexInformer) []T {
	var out []T
	for _, obj := range inf.GetStore().List() {
		if o, ok := obj.(T); ok {
			out = append(out, o)
		}
	}
	return out
}
