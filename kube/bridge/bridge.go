// Package bridge makes Kubernetes follow the coordinator. It finds a
// job's workloads by label (elastic.job, elastic.role), sets their replicas
// through the scale subresource when the job's np changes, writes the
// ConfigMap <job>-elastic with the endpoints of every committed generation,
// keeps a headless Service per pod in Service mode, evicts a node at once
// when its pod is deleted or fails, and applies cleanPodPolicy when the job
// ends.
//
// It reads the coordinator's published records from etcd like any client;
// it writes only its own report (Keys.Bridge) and the evictions of nodes
// whose pods are gone (presence.Evict: a revoked lease, and a record
// unless Kubernetes says the pod's containers stopped).
package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// Labels and annotations the bridge reads.
const (
	// LabelJob names the job a workload or pod belongs to.
	LabelJob = "elastic.job"
	// LabelRole is the role of a workload's pods: worker, ps or scheduler.
	LabelRole = "elastic.role"
	// AnnotationIntranet on a pod, "Service", asks for a headless Service
	// of the pod's name that the pod's sidecar advertises.
	AnnotationIntranet = "elastic.intranet"
	// AnnotationGeneration on the ConfigMap is the generation it describes.
	AnnotationGeneration = "elastic.generation"
	// statefulSetPodName is the label StatefulSets give each pod.
	statefulSetPodName = "statefulset.kubernetes.io/pod-name"
)

// StatefulSets is the default workload resource.
var StatefulSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}

// Config configures a Bridge.
type Config struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	Etcd    *clientv3.Client
	Keys    membership.Keys
	// Namespace is where the jobs' workloads and pods live; the bridge
	// needs only a Role there. "" (metav1.NamespaceAll) is every namespace,
	// with a ClusterRole: a job is where its worker workload is.
	Namespace string
	// Workloads are the resources a job's workloads can be: anything with a
	// scale subresource. StatefulSets if empty.
	Workloads []schema.GroupVersionResource
	Logger    hclog.Logger
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
	if cfg.Kube == nil || cfg.Dynamic == nil || cfg.Etcd == nil {
		return nil, errors.New("bridge: kubernetes, dynamic and etcd clients are required")
	}
	if cfg.Keys == (membership.Keys{}) {
		cfg.Keys = membership.DefaultKeys()
	}
	if len(cfg.Workloads) == 0 {
		cfg.Workloads = []schema.GroupVersionResource{StatefulSets}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Bridge{cfg: cfg, logger: cfg.Logger.Named("bridge").With("namespace", namespaceName(cfg.Namespace)), metrics: m}, nil
}

// namespaceName is a namespace for people: "" is every namespace.
func namespaceName(ns string) string {
	if ns == "" {
		return "(all)"
	}
	return ns
}

// Lead runs the bridge until ctx ends.
func (b *Bridge) Lead(ctx context.Context) error {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: b.cfg.Kube.CoreV1().Events(b.cfg.Namespace)})
	defer broadcaster.Shutdown()
	r := &run{
		Bridge:   b,
		recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "elastic-coordinator"}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			retryLimiter(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "elastic-jobs"}),
		jobs:     map[string]*jobRecords{},
		reported: map[string]reportedState{},
		configs:  map[string]writtenConfig{},
	}
	return r.run(ctx)
}

// retryLimiter spaces the retries of a job whose reconcile failed: from
// 5 ms, doubling up to 30 s, and 10 a second overall. It is client-go's
// controller default but for the cap, 1000 s there: the pods of a
// generation read its ConfigMap, which should not come a quarter of an hour
// after the API server lets the bridge write it again.
func retryLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 30*time.Second),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// run is one leadership term of the bridge.
type run struct {
	*Bridge
	recorder record.EventRecorder
	queue    workqueue.TypedRateLimitingInterface[string]
	cache    *kubeCache

	mu   sync.Mutex
	jobs map[string]*jobRecords // the etcd side, by job

	// Owned by the reconcile worker.
	reported map[string]reportedState
	configs  map[string]writtenConfig
}

func (r *run) run(ctx context.Context) error {
	defer r.queue.ShutDown()
	cache, err := startKubeCache(ctx, r.Bridge, r.podChanged, r.workloadChanged)
	if err != nil {
		return err
	}
	r.cache = cache
	defer cache.stop()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		r.followEtcd(ctx)
	}()
	go func() {
		defer wg.Done()
		for r.processNext(ctx) {
		}
	}()
	<-ctx.Done()
	r.queue.ShutDown()
	wg.Wait()
	return nil
}

// processNext reconciles one job from the queue; false when the queue is
// shut down.
func (r *run) processNext(ctx context.Context) bool {
	job, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(job)
	reconcileCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.reconcile(reconcileCtx, job); err != nil && ctx.Err() == nil {
		if errors.Is(err, errReported) {
			r.logger.Debug("reconcile failed; retrying", "job", job, "error", err)
		} else {
			r.logger.Warn("reconcile failed; retrying", "job", job, "error", err)
		}
		r.queue.AddRateLimited(job)
		return true
	}
	r.queue.Forget(job)
	return true
}

// jobRecords are a job's records in etcd that the bridge follows.
type jobRecords = membership.JobRecords

// followEtcd keeps r.jobs current and queues every job that changes.
func (r *run) followEtcd(ctx context.Context) {
	_ = presence.Follow(ctx, r.cfg.Etcd, presence.Range{Key: r.cfg.Keys.Jobs(), Prefix: true}, r.logger,
		func(u presence.Update) error {
			r.mu.Lock()
			if u.Reset {
				clear(r.jobs)
			}
			touched := map[string]bool{}
			for _, kv := range u.Changes {
				jk, ok := r.cfg.Keys.ParseJobKey(kv.Key)
				if !ok || (jk.Kind != membership.KindSpec && jk.Kind != membership.KindPlan && jk.Kind != membership.KindStatus && jk.Kind != membership.KindTable) {
					continue
				}
				j := r.jobs[jk.Job]
				if j == nil {
					j = &jobRecords{}
					r.jobs[jk.Job] = j
				}
				j.Apply(jk, kv)
				touched[jk.Job] = true
			}
			if u.Reset {
				for job := range r.jobs {
					touched[job] = true
				}
			}
			r.mu.Unlock()
			for job := range touched {
				r.queue.Add(job)
			}
			return nil
		})
}

// records returns a copy of a job's records, or false if the job has none.
func (r *run) records(job string) (jobRecords, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[job]
	if !ok {
		return jobRecords{}, false
	}
	return *j, true
}

func (r *run) workloadChanged(job string) { r.queue.Add(job) }

func describe(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource
	}
	return fmt.Sprintf("%s.%s", gvr.Resource, gvr.Group)
}
