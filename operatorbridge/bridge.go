package operatorbridge

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge/controller"
)

// statefulSetPodName is the label StatefulSets give each pod.
const statefulSetPodName = "statefulset.kubernetes.io/pod-name"

// StatefulSets is the default workload resource.
var StatefulSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}

// Config configures a Bridge. Its Namespace is where the jobs' workloads
// and pods live: the bridge needs only a Role there. With "" (every
// namespace, a ClusterRole) a job is where its worker workload is.
type Config struct {
	controller.Clients
	// Workloads are the resources a job's workloads can be: anything with a
	// scale subresource. StatefulSets if empty.
	Workloads []schema.GroupVersionResource
	// Registerer receives the bridge's metrics; none if nil.
	Registerer prometheus.Registerer
}

// Bridge is the Kubernetes side of the coordinator. It implements the
// coordinator's LeaderTask: only the leader runs it.
type Bridge struct {
	cfg     Config
	logger  hclog.Logger
	metrics *metrics
}

// New validates cfg.
func New(cfg Config) (*Bridge, error) {
	if err := cfg.Complete(); err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	if len(cfg.Workloads) == 0 {
		cfg.Workloads = []schema.GroupVersionResource{StatefulSets}
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	cfg.Logger = cfg.Logger.Named("bridge").With("namespace", controller.NamespaceName(cfg.Namespace))
	return &Bridge{cfg: cfg, logger: cfg.Logger, metrics: m}, nil
}

// Lead runs the bridge until ctx ends.
func (b *Bridge) Lead(ctx context.Context) error {
	t := &term{
		Bridge: b,
		Term:   controller.StartTerm(ctx, b.cfg.Clients, "elastic-coordinator"),
		records: &controller.Records{Kinds: []membership.KeyKind{
			membership.KindSpec, membership.KindPlan, membership.KindStatus, membership.KindTable}},
		reported: map[string]reportedState{},
		configs:  map[string]writtenConfig{},
	}
	defer t.Stop()
	t.NewQueue("elastic-jobs", controller.RetryLimiter())
	cache, err := startKubeCache(ctx, b, t.podChanged, t.workloadChanged)
	if err != nil {
		return err
	}
	t.cache = cache
	defer cache.stop()
	t.Follow(ctx, t.records, t.recordsChanged)
	return t.Run(ctx, t, t.failed)
}

// term is one leadership term of the bridge. Its queue holds job ids.
type term struct {
	*Bridge
	*controller.Term
	cache   *kubeCache
	records *controller.Records // the etcd side

	// Owned by the reconcile worker.
	reported map[string]reportedState
	configs  map[string]writtenConfig
}

var _ controller.Reconciler = (*term)(nil)

// Reconcile makes Kubernetes follow one job.
func (t *term) Reconcile(ctx context.Context, job string) (controller.Result, error) {
	return controller.Result{}, t.reconcile(ctx, job)
}

// failed says a reconcile that failed; the job is retried.
func (t *term) failed(job string, err error) {
	if errors.Is(err, errReported) {
		t.logger.Debug("reconcile failed; retrying", "job", job, "error", err)
	} else {
		t.logger.Warn("reconcile failed; retrying", "job", job, "error", err)
	}
}

// recordsChanged queues every job whose records changed.
func (t *term) recordsChanged(u controller.Update) {
	for _, c := range u.Changes {
		if !c.Dropped {
			t.Queue.Add(c.Job)
		}
	}
}

func (t *term) workloadChanged(job string) { t.Queue.Add(job) }

// resourceName is a resource as kubectl names it: RESOURCE.GROUP.
func resourceName(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource
	}
	return fmt.Sprintf("%s.%s", gvr.Resource, gvr.Group)
}
