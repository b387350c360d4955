// Package jobcontroller runs training jobs written as Kubernetes resources
// — ElasticJob (api/v1) — on the coordinator: for each job it writes the
// etcd spec, creates a StatefulSet per role with the sidecar injected and a
// headless Service that governs them, and reports the coordinator's view of
// the job in the resource's status, with Events. Everything it creates is
// owned by the job's resource and goes with it.
//
// It leaves to the operator bridge what the bridge does for any job:
// replicas (np's maximum of workers), the endpoint ConfigMap, the per-pod
// Services of Service mode, evictions and cleanPodPolicy. The resource is
// the job's source of truth: its spec is written to etcd, and a change of
// the etcd spec made elsewhere is undone.
package jobcontroller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/kube/bridge"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// Config configures a Controller.
type Config struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	Etcd    *clientv3.Client
	Keys    membership.Keys
	// Namespace is where the jobs live; "" (metav1.NamespaceAll) is every
	// namespace, with a ClusterRole.
	Namespace string
	Sidecar   Sidecar
	// Kinds are the kinds served; AllKinds if empty.
	Kinds []Kind
	// Entrypoints reads the command of images run without one.
	Entrypoints *Entrypoints
	Logger      hclog.Logger
}

// Controller runs the jobs of one namespace. It implements the
// coordinator's LeaderTask: only the leader runs it.
type Controller struct {
	cfg    Config
	logger hclog.Logger
}

// New validates cfg.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Kube == nil || cfg.Dynamic == nil || cfg.Etcd == nil:
		return nil, errors.New("jobcontroller: kubernetes, dynamic and etcd clients are required")
	case cfg.Sidecar.Image == "":
		return nil, errors.New("jobcontroller: no sidecar image")
	case cfg.Sidecar.EtcdEndpoints == "":
		return nil, errors.New("jobcontroller: no etcd endpoints for the sidecars")
	}
	if cfg.Keys == (membership.Keys{}) {
		cfg.Keys = membership.DefaultKeys()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = AllKinds
	}
	if cfg.Entrypoints == nil {
		cfg.Entrypoints = &Entrypoints{}
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = "(all)"
	}
	return &Controller{cfg: cfg, logger: cfg.Logger.Named("jobs").With("namespace", ns)}, nil
}

// term is one leadership term of the controller.
type term struct {
	*Controller
	recorder record.EventRecorder
	// queue holds keys KIND/NAME.
	queue workqueue.TypedRateLimitingInterface[string]
	kinds map[string]*servedKind
	sets  appslisters.StatefulSetLister
	// setsSynced tells whether the StatefulSet cache is filled.
	setsSynced cache.InformerSynced

	mu       sync.Mutex
	records  map[string]*etcdRecords // by job id
	watchErr map[string]string       // by resource

	// Owned by the reconcile worker: the Warning Events said, by job and
	// reason, so that a problem is said once.
	warned map[string]map[string]string
	// reports are the last report of each job, by key.
	reports map[string]jobv1.ElasticJobStatus
	// users are the etcd passwords set this term, by job.
	users map[string]string
	// fenced are the comparisons every etcd transaction adds: the lead is
	// still this replica's.
	fenced []clientv3.Cmp
}

// etcdRecords are what the coordinator and the bridge wrote of a job.
type etcdRecords = membership.JobRecords

// Lead runs the controller until ctx ends.
func (c *Controller) Lead(ctx context.Context) error {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.cfg.Kube.CoreV1().Events(c.cfg.Namespace)})
	defer broadcaster.Shutdown()
	t := &term{
		Controller: c,
		recorder:   broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "elastic-coordinator"}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "elastic-job-resources"}),
		records:  map[string]*etcdRecords{},
		kinds:    map[string]*servedKind{},
		watchErr: map[string]string{},
		warned:   map[string]map[string]string{},
		reports:  map[string]jobv1.ElasticJobStatus{},
		users:    map[string]string{},
	}
	if fence, ok := presence.LeaderFence(ctx); ok {
		t.fenced = append(t.fenced, fence)
	}
	defer t.queue.ShutDown()
	stop, err := t.startInformers()
	if err != nil {
		return err
	}
	defer stop()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		t.followEtcd(ctx)
	}()
	go func() {
		defer wg.Done()
		for t.processNext(ctx) {
		}
	}()
	<-ctx.Done()
	t.queue.ShutDown()
	wg.Wait()
	return nil
}

// servedKind is a kind and its cache.
type servedKind struct {
	Kind
	lister cache.GenericLister
	synced cache.InformerSynced
}

// startInformers watches the namespace's jobs of every kind and the
// StatefulSets that carry a job label. A kind that cannot be listed (its
// CRD missing, RBAC) is logged and retried; the other kinds go on.
func (t *term) startInformers() (stop func(), err error) {
	ns := t.cfg.Namespace
	stopCh := make(chan struct{})
	dyn := dynamicinformer.NewFilteredDynamicSharedInformerFactory(t.cfg.Dynamic, 0, ns, nil)
	typed := informers.NewSharedInformerFactoryWithOptions(t.cfg.Kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = bridge.LabelJob }))

	for _, k := range t.cfg.Kinds {
		inf := dyn.ForResource(k.Resource)
		if err := inf.Informer().SetWatchErrorHandlerWithContext(t.watchError(k.Resource.GroupResource().String())); err != nil {
			return nil, err
		}
		enqueue := func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if m, ok := obj.(metav1.Object); ok {
				t.queue.Add(key(k.Name, m.GetNamespace(), m.GetName()))
			}
		}
		if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
		}); err != nil {
			return nil, err
		}
		t.kinds[k.Name] = &servedKind{Kind: k, lister: inf.Lister(), synced: inf.Informer().HasSynced}
	}
	sets := typed.Apps().V1().StatefulSets()
	ownerOf := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			if ref := metav1.GetControllerOf(m); ref != nil && t.kinds[ref.Kind] != nil {
				t.queue.Add(key(ref.Kind, m.GetNamespace(), ref.Name))
			}
		}
	}
	if _, err := sets.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: ownerOf, UpdateFunc: func(_, obj any) { ownerOf(obj) }, DeleteFunc: ownerOf,
	}); err != nil {
		return nil, err
	}
	t.sets, t.setsSynced = sets.Lister(), sets.Informer().HasSynced
	dyn.Start(stopCh)
	typed.Start(stopCh)
	return func() {
		close(stopCh)
		dyn.Shutdown()
		typed.Shutdown()
	}, nil
}

// key is the queue's key of a job: KIND/NAMESPACE/NAME.
func key(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// keyOf is the key of a resource.
func keyOf(u *unstructured.Unstructured) string {
	return key(u.GetKind(), u.GetNamespace(), u.GetName())
}

// ownerKey is the key of the resource a spec's owner names, and its
// namespace, if any.
func ownerKey(s *membership.Spec) (string, string, bool) {
	if s == nil {
		return "", "", false
	}
	parts := strings.Split(s.Owner, "/") // Kind/namespace/name/uid
	if len(parts) != 4 {
		return "", "", false
	}
	return key(parts[0], parts[1], parts[2]), parts[1], true
}

// serves reports whether the controller follows a namespace's jobs: the
// records of a job of another namespace are not its to touch.
func (t *term) serves(ns string) bool { return t.cfg.Namespace == "" || ns == t.cfg.Namespace }

func (t *term) watchError(resource string) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		msg := fmt.Sprintf("cannot list or watch %s in namespace %q: %v", resource, t.cfg.Namespace, err)
		t.mu.Lock()
		defer t.mu.Unlock()
		switch {
		case t.watchErr[resource] == msg:
		case apierrors.IsNotFound(err):
			t.logger.Info("resource not installed; its jobs are served once its CRD is", "resource", resource)
		default:
			t.logger.Error("kubernetes watch failed; jobs of other kinds go on", "resource", resource, "error", err)
		}
		t.watchErr[resource] = msg
	}
}

// processNext reconciles one job; false once the queue is shut down.
func (t *term) processNext(ctx context.Context) bool {
	item, quit := t.queue.Get()
	if quit {
		return false
	}
	defer t.queue.Done(item)
	parts := strings.SplitN(item, "/", 3)
	k := t.kinds[parts[0]]
	if k == nil || len(parts) != 3 {
		t.queue.Forget(item)
		return true
	}
	if !k.synced() || !t.setsSynced() {
		// A kind that cannot be listed (its CRD missing) may stay so:
		// back off, as for a failure.
		t.queue.AddRateLimited(item)
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ns, name := parts[1], parts[2]
	if !t.serves(ns) {
		t.queue.Forget(item)
		return true
	}
	err := t.reconcile(rctx, k, ns, name)
	var waiting previousNodes
	switch {
	case err == nil || ctx.Err() != nil:
	case errors.As(err, &waiting):
		// Nothing in the watched keys says when they are gone: look again.
		t.logger.Debug("waiting for a job's previous pods", "kind", k.Name, "job", name, "why", err)
		t.queue.Forget(item)
		t.queue.AddAfter(item, time.Second)
		return true
	default:
		if apierrors.IsConflict(err) {
			// The cache had an older version: the watch brings the new.
			t.logger.Debug("reconcile raced a change; retrying", "kind", k.Name, "job", name, "error", err)
		} else {
			t.logger.Warn("reconcile failed; retrying", "kind", k.Name, "job", name, "error", err)
		}
		t.queue.AddRateLimited(item)
		return true
	}
	t.queue.Forget(item)
	return true
}

// followEtcd keeps t.records current and queues the job of every change.
func (t *term) followEtcd(ctx context.Context) {
	_ = presence.Follow(ctx, t.cfg.Etcd, presence.Range{Key: t.cfg.Keys.Jobs(), Prefix: true}, t.logger,
		func(u presence.Update) error {
			// The resource of a record is its spec's owner, before the
			// change or after it; a job of no resource's may have held the
			// id of one waiting for it.
			keys, ids := map[string]bool{}, map[string]bool{}
			touch := func(job string, r *etcdRecords) {
				if k, ns, ok := ownerKey(r.Spec); ok {
					if t.serves(ns) {
						keys[k] = true
					}
				} else {
					ids[job] = true
				}
			}
			t.mu.Lock()
			if u.Reset {
				for job, r := range t.records {
					touch(job, r)
				}
				clear(t.records)
			}
			for _, kv := range u.Changes {
				jk, ok := t.cfg.Keys.ParseJobKey(kv.Key)
				if !ok || (jk.Kind != membership.KindSpec && jk.Kind != membership.KindStatus && jk.Kind != membership.KindBridge) {
					continue
				}
				r := t.records[jk.Job]
				if r == nil {
					r = &etcdRecords{}
					t.records[jk.Job] = r
				}
				touch(jk.Job, r)
				r.Apply(jk, kv)
				touch(jk.Job, r)
			}
			t.mu.Unlock()
			for k := range keys {
				t.queue.Add(k)
			}
			for job := range ids {
				t.queueNamed(job)
			}
			return nil
		})
}

// recordsOf returns a copy of a job's etcd records.
func (t *term) recordsOf(job string) etcdRecords {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.records[job]; r != nil {
		return *r
	}
	return etcdRecords{}
}

// queueNamed queues every resource of a name, of any kind and namespace.
func (t *term) queueNamed(name string) {
	for _, k := range t.kinds {
		objs, err := k.lister.List(labels.Everything())
		if err != nil {
			continue
		}
		for _, o := range objs {
			if m, ok := o.(metav1.Object); ok && m.GetName() == name {
				t.queue.Add(key(k.Name, m.GetNamespace(), name))
			}
		}
	}
}

// object returns a job's resource from the cache, or nil.
func (t *term) object(k *servedKind, ns, name string) *unstructured.Unstructured {
	obj, err := k.lister.ByNamespace(ns).Get(name)
	if err != nil {
		return nil
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}
