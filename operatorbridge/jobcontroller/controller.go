package jobcontroller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge/controller"
	"github.com/elastictraining/coordinator/presence"
)

// Config configures a Controller. Its Namespace is where the jobs live;
// "" (metav1.NamespaceAll) is every namespace, with a ClusterRole.
type Config struct {
	controller.Clients
	Sidecar Sidecar
	// Kinds are the kinds served; AllKinds if empty.
	Kinds []Kind
	// Entrypoints reads the command of images run without one.
	Entrypoints *Entrypoints
	// Kueue runs the jobs labelled with a Kueue queue as Kueue admits
	// them (admission); off, such a job stays suspended and says why.
	Kueue bool
}

// Controller runs the jobs of one namespace. It implements the
// coordinator's LeaderTask: only the leader runs it.
type Controller struct {
	cfg    Config
	logger hclog.Logger
}

// New validates cfg.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Complete(); err != nil {
		return nil, fmt.Errorf("jobcontroller: %w", err)
	}
	switch {
	case cfg.Sidecar.Image == "":
		return nil, errors.New("jobcontroller: no sidecar image")
	case cfg.Sidecar.EtcdEndpoints == "":
		return nil, errors.New("jobcontroller: no etcd endpoints for the sidecars")
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = AllKinds
	}
	if cfg.Entrypoints == nil {
		cfg.Entrypoints = &Entrypoints{}
	}
	cfg.Logger = cfg.Logger.Named("jobs").With("namespace", controller.NamespaceName(cfg.Namespace))
	return &Controller{cfg: cfg, logger: cfg.Logger}, nil
}

// term is one leadership term of the controller. Its queue holds keys
// KIND/NAMESPACE/NAME.
type term struct {
	*Controller
	*controller.Term
	kinds map[string]*servedKind
	sets  appslisters.StatefulSetLister
	// setsSynced tells whether the StatefulSet cache is filled.
	setsSynced  cache.InformerSynced
	watchErrors controller.WatchErrors
	// records are what the coordinator and the bridge wrote of each job.
	records *controller.Records

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

	// workloads are Kueue's Workloads the controller made, with Kueue
	// on; nil with it off.
	workloads       cache.GenericLister
	workloadsSynced cache.InformerSynced
	// queued is what Kueue made of each queued job, by key, for its
	// status; owned by the reconcile worker.
	queued map[string]*queueView
}

var _ controller.Reconciler = (*term)(nil)

// Lead runs the controller until ctx ends.
func (c *Controller) Lead(ctx context.Context) error {
	t := &term{
		Controller:  c,
		Term:        controller.StartTerm(ctx, c.cfg.Clients, "elastic-coordinator"),
		kinds:       map[string]*servedKind{},
		watchErrors: controller.WatchErrors{Namespace: c.cfg.Namespace},
		records: &controller.Records{Kinds: []membership.KeyKind{
			membership.KindSpec, membership.KindStatus, membership.KindBridge}},
		warned:  map[string]map[string]string{},
		reports: map[string]jobv1.ElasticJobStatus{},
		users:   map[string]string{},
		queued:  map[string]*queueView{},
	}
	defer t.Stop()
	t.NewQueue("elastic-job-resources", controller.RetryLimiter())
	if fence, ok := presence.LeaderFence(ctx); ok {
		t.fenced = append(t.fenced, fence)
	}
	stop, err := t.startInformers()
	if err != nil {
		return err
	}
	defer stop()
	t.Follow(ctx, t.records, t.recordsChanged)
	return t.Run(ctx, t, t.failed)
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
	informers := controller.NewInformers(t.cfg.Clients, jobv1.LabelJob, "")
	for _, k := range t.cfg.Kinds {
		inf := informers.Dynamic.ForResource(k.Resource)
		if err := inf.Informer().SetWatchErrorHandlerWithContext(t.watchError(k.Resource.GroupResource().String())); err != nil {
			return nil, err
		}
		if _, err := inf.Informer().AddEventHandler(controller.OnObject(func(m metav1.Object) {
			t.Queue.Add(key(k.Name, m.GetNamespace(), m.GetName()))
		})); err != nil {
			return nil, err
		}
		t.kinds[k.Name] = &servedKind{Kind: k, lister: inf.Lister(), synced: inf.Informer().HasSynced}
	}
	sets := informers.Typed.Apps().V1().StatefulSets()
	if _, err := sets.Informer().AddEventHandler(controller.OnObject(func(m metav1.Object) {
		if ref := metav1.GetControllerOf(m); ref != nil && t.kinds[ref.Kind] != nil {
			t.Queue.Add(key(ref.Kind, m.GetNamespace(), ref.Name))
		}
	})); err != nil {
		return nil, err
	}
	t.sets, t.setsSynced = sets.Lister(), sets.Informer().HasSynced
	informers.Start()
	if !t.cfg.Kueue {
		return informers.Stop, nil
	}
	stopWorkloads := make(chan struct{})
	t.startWorkloadInformer(stopWorkloads)
	return func() { close(stopWorkloads); informers.Stop() }, nil
}

// key is the queue's key of a job: KIND/NAMESPACE/NAME.
func key(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// parseKey takes a key apart.
func parseKey(k string) (kind, namespace, name string, ok bool) {
	parts := strings.SplitN(k, "/", 3)
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

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
	return t.watchErrors.Handler(resource, func(err error) {
		if apierrors.IsNotFound(err) {
			t.logger.Info("resource not installed; its jobs are served once its CRD is", "resource", resource)
		} else {
			t.logger.Error("kubernetes watch failed; jobs of other kinds go on", "resource", resource, "error", err)
		}
	})
}

// Reconcile runs one job, of key KIND/NAMESPACE/NAME.
func (t *term) Reconcile(ctx context.Context, item string) (controller.Result, error) {
	kind, ns, name, ok := parseKey(item)
	k := t.kinds[kind]
	if k == nil || !ok {
		return controller.Result{}, nil
	}
	if !k.synced() || !t.setsSynced() {
		// A kind that cannot be listed (its CRD missing) may stay so:
		// back off, as for a failure.
		return controller.Result{Requeue: true}, nil
	}
	if !t.serves(ns) {
		return controller.Result{}, nil
	}
	err := t.reconcile(ctx, k, ns, name)
	var unreadable unreadableImage
	if errors.As(err, &unreadable) {
		// A registry says nothing when it is back: try it again.
		t.logger.Debug("waiting for an image's registry", "kind", k.Name, "job", name, "why", err)
		return controller.Result{RequeueAfter: imageRetry}, nil
	}
	var later recheckAfter
	if errors.As(err, &later) {
		return controller.Result{RequeueAfter: time.Duration(later)}, nil
	}
	var waiting previousNodes
	if errors.As(err, &waiting) {
		// Nothing in the watched keys says when they are gone: look again.
		t.logger.Debug("waiting for a job's previous pods", "kind", k.Name, "job", name, "why", err)
		return controller.Result{RequeueAfter: time.Second}, nil
	}
	return controller.Result{}, err
}

// failed says a reconcile that failed; the job is retried.
func (t *term) failed(item string, err error) {
	kind, _, name, _ := parseKey(item)
	if apierrors.IsConflict(err) {
		// The cache had an older version: the watch brings the new.
		t.logger.Debug("reconcile raced a change; retrying", "kind", kind, "job", name, "error", err)
	} else {
		t.logger.Warn("reconcile failed; retrying", "kind", kind, "job", name, "error", err)
	}
}

// recordsChanged queues the resource of every job whose records changed:
// its spec's owner, before the change or after it. A job of no resource's
// may have held the id of one waiting for it: every resource of its name
// is queued.
func (t *term) recordsChanged(u controller.Update) {
	keys, ids := map[string]bool{}, map[string]bool{}
	touch := func(job string, spec *membership.Spec) {
		if k, ns, ok := ownerKey(spec); ok {
			if t.serves(ns) {
				keys[k] = true
			}
		} else {
			ids[job] = true
		}
	}
	for _, c := range u.Changes {
		touch(c.Job, c.Before)
		if !c.Dropped {
			touch(c.Job, c.After)
		}
	}
	for k := range keys {
		t.Queue.Add(k)
	}
	for job := range ids {
		t.queueNamed(job)
	}
}

// recordsOf returns a copy of a job's etcd records.
func (t *term) recordsOf(job string) membership.JobRecords {
	rec, _ := t.records.Get(job)
	return rec
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
				t.Queue.Add(key(k.Name, m.GetNamespace(), name))
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
