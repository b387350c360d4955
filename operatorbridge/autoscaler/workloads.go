package autoscaler

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
)

// expectFor is how long after a workload's controller was asked for more
// pods the ones it has not created yet are counted as pending. A pod its
// controller cannot create (a quota, an admission webhook) stops taking
// room after that.
const expectFor = 30 * time.Second

// stuckAfter is how long past its deletion time (the request's time and
// its grace period) a pod still being deleted is taken to be stuck (a
// finalizer, a node gone): the scheduler still counts its room as taken,
// and so does the autoscaler.
const stuckAfter = 15 * time.Second

// workloads follows the controllers of other workloads' pods, ReplicaSets
// (a Deployment's, an HPA's) and StatefulSets, and the PriorityClasses, for
// two things the pods alone do not say:
//
//   - the pods a controller is about to create (spec.replicas above the
//     pods it has): the autoscaler makes room for them from the moment it
//     is asked, not once they exist, fail to schedule and are backed off by
//     the scheduler, so that a workload of a higher priority scaling up is
//     not slowed down by the training jobs (EDL's was);
//   - whether a pod being deleted will be replaced: only the room of one
//     that will not (a scale-down) is free; a StatefulSet recreates a pod
//     once the old one is gone, and its room must not be grown into
//     meanwhile.
//
// The elastic jobs' own StatefulSets are the jobs' demand, not others'.
type workloads struct {
	replicaSets  cache.SharedIndexInformer
	statefulSets cache.SharedIndexInformer
	classes      cache.SharedIndexInformer

	mu     sync.Mutex
	raised map[types.UID]time.Time // when each controller was created or last asked for more pods
}

// newWorkloads adds the informers it can use to factory: those the
// autoscaler may list (deploy/autoscaler's ClusterRole). Without them it
// expects nothing and takes every pod being deleted as replaced, and says
// so once.
func newWorkloads(ctx context.Context, kube kubernetes.Interface, factory informers.SharedInformerFactory, poke func(), warn func(string, ...any)) *workloads {
	w := &workloads{raised: map[types.UID]time.Time{}}
	can := func(what string, list func() error) bool {
		err := list()
		switch {
		case err == nil:
			return true
		case apierrors.IsForbidden(err):
			warn("cannot list "+what+" (deploy/autoscaler's ClusterRole grants it): pods their controllers are about to create get no room before they exist", "error", err)
		default:
			warn("cannot list "+what+": going without them", "error", err)
		}
		return false
	}
	one := metav1.ListOptions{Limit: 1}
	if can("replicasets", func() error { _, err := kube.AppsV1().ReplicaSets("").List(ctx, one); return err }) {
		w.replicaSets = factory.Apps().V1().ReplicaSets().Informer()
		w.follow(w.replicaSets, poke)
	}
	if can("statefulsets", func() error { _, err := kube.AppsV1().StatefulSets("").List(ctx, one); return err }) {
		w.statefulSets = factory.Apps().V1().StatefulSets().Informer()
		w.follow(w.statefulSets, poke)
	}
	if can("priorityclasses", func() error { _, err := kube.SchedulingV1().PriorityClasses().List(ctx, one); return err }) {
		w.classes = factory.Scheduling().V1().PriorityClasses().Informer()
	}
	return w
}

// synced are the informers' HasSynced, to wait for.
func (w *workloads) synced() []cache.InformerSynced {
	var out []cache.InformerSynced
	for _, inf := range []cache.SharedIndexInformer{w.replicaSets, w.statefulSets, w.classes} {
		if inf != nil {
			out = append(out, inf.HasSynced)
		}
	}
	return out
}

// follow notes when a controller was created (its creation time: one seen
// in an informer's first list was asked for its pods long ago) or asked
// for more pods, and pokes a pass.
func (w *workloads) follow(inf cache.SharedIndexInformer, poke func()) {
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if m, ok := obj.(metav1.Object); ok {
				w.noteRaised(m.GetUID(), m.GetCreationTimestamp().Time)
			}
			poke()
		},
		UpdateFunc: func(old, obj any) {
			if replicasOf(obj) > replicasOf(old) {
				w.noteRaised(obj.(metav1.Object).GetUID(), time.Now())
				poke()
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if m, ok := obj.(metav1.Object); ok {
				w.mu.Lock()
				delete(w.raised, m.GetUID())
				w.mu.Unlock()
			}
		},
	})
}

func (w *workloads) noteRaised(uid types.UID, at time.Time) {
	w.mu.Lock()
	w.raised[uid] = at
	w.mu.Unlock()
}

func replicasOf(obj any) int32 {
	switch o := obj.(type) {
	case *appsv1.ReplicaSet:
		return ptrOr(o.Spec.Replicas, 1)
	case *appsv1.StatefulSet:
		return ptrOr(o.Spec.Replicas, 1)
	}
	return 0
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// workload is a controller of pods: a ReplicaSet or a StatefulSet.
type workload struct {
	kind     string
	meta     metav1.ObjectMeta
	replicas int32
	template corev1.PodTemplateSpec
}

// controllers is what the pass knows of the controllers: nil when neither
// informer may be used.
type controllers struct {
	list    []workload
	classes []*schedulingv1.PriorityClass
	// classesKnown is false when PriorityClasses may not be listed: a
	// template's priority is then an existing pod's of its workload.
	classesKnown bool
	raised       map[types.UID]time.Time
}

// snapshot copies what the informers hold, for one pass.
func (w *workloads) snapshot() *controllers {
	if w == nil || (w.replicaSets == nil && w.statefulSets == nil) {
		return nil
	}
	c := &controllers{classesKnown: w.classes != nil}
	for _, obj := range listOrNil(w.replicaSets) {
		if rs, ok := obj.(*appsv1.ReplicaSet); ok {
			c.list = append(c.list, workload{"replicaset", rs.ObjectMeta, replicasOf(rs), rs.Spec.Template})
		}
	}
	for _, obj := range listOrNil(w.statefulSets) {
		if sts, ok := obj.(*appsv1.StatefulSet); ok {
			c.list = append(c.list, workload{"statefulset", sts.ObjectMeta, replicasOf(sts), sts.Spec.Template})
		}
	}
	for _, obj := range listOrNil(w.classes) {
		if pc, ok := obj.(*schedulingv1.PriorityClass); ok {
			c.classes = append(c.classes, pc)
		}
	}
	w.mu.Lock()
	c.raised = make(map[types.UID]time.Time, len(w.raised))
	for uid, at := range w.raised {
		c.raised[uid] = at
	}
	w.mu.Unlock()
	return c
}

// expected returns pending pods without a node for the pods the workloads
// are about to create: each one's replicas less the pods it has that are
// not finished or being deleted, for expectFor after it was created or
// last asked for more, and when the next of those windows closes (zero if
// none is open). A workload whose template names a PriorityClass that
// does not exist is left out: its pods would be refused.
func (c *controllers) expected(existing []*corev1.Pod, now time.Time) ([]*corev1.Pod, time.Time) {
	if c == nil {
		return nil, time.Time{}
	}
	have := map[types.UID]int32{}
	priorityOfPods := map[types.UID]*int32{}
	for _, p := range existing {
		ref := metav1.GetControllerOf(p)
		if ref == nil {
			continue
		}
		if p.Spec.Priority != nil {
			priorityOfPods[ref.UID] = p.Spec.Priority
		}
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			have[ref.UID]++
		}
	}
	var out []*corev1.Pod
	var next time.Time
	for _, w := range c.list {
		if w.meta.DeletionTimestamp != nil || w.template.Labels[jobv1.LabelJob] != "" {
			continue
		}
		at, ok := c.raised[w.meta.UID]
		if !ok || now.Sub(at) > expectFor || w.replicas <= have[w.meta.UID] {
			continue
		}
		if closes := at.Add(expectFor); next.IsZero() || closes.Before(next) {
			next = closes
		}
		prio, ok := c.priorityOf(&w.template.Spec, priorityOfPods[w.meta.UID])
		if !ok {
			continue
		}
		for i := range w.replicas - have[w.meta.UID] {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.meta.Namespace,
				Name: fmt.Sprintf("%s/%s (to be created, %d)", w.kind, w.meta.Name, i+1)}, Spec: *w.template.Spec.DeepCopy()}
			pod.Spec.Priority = &prio
			out = append(out, pod)
		}
	}
	return out, next
}

// priorityOf resolves a pod template's priority as the API server's
// admission does for its pods: its class's value, or the lowest value of
// the default classes, or 0; false for a class that does not exist. Where
// classes may not be listed, an existing pod's of the workload (fromPod),
// or 0.
func (c *controllers) priorityOf(spec *corev1.PodSpec, fromPod *int32) (int32, bool) {
	if spec.Priority != nil {
		return *spec.Priority, true
	}
	if !c.classesKnown {
		if fromPod != nil {
			return *fromPod, true
		}
		return 0, true
	}
	var value int32
	defaulted := false
	for _, pc := range c.classes {
		switch {
		case spec.PriorityClassName != "":
			if pc.Name == spec.PriorityClassName {
				return pc.Value, true
			}
		case pc.GlobalDefault && (!defaulted || pc.Value < value):
			value, defaulted = pc.Value, true
		}
	}
	if spec.PriorityClassName != "" {
		return 0, false
	}
	return value, true
}

// roomKeeper returns whether a pod being deleted still takes its room on
// its node: it is stuck past its deletion time, or its controller will
// replace it (wants as many pods as it has, this one included), or its
// controller is not one the autoscaler follows (a DaemonSet's, a Job's).
// A pod of no controller, a scale-down's surplus and an elastic job's
// worker beyond its target free their room: counted as taken, the room a
// shrink is freeing would be asked of the jobs again at the next pass, and
// a workload scaling down would free nothing until its last pod went.
func (c *controllers) roomKeeper(pods []*corev1.Pod, candidates map[string]candidate, now time.Time) func(*corev1.Pod) bool {
	count := map[types.UID]int32{}
	for _, q := range pods {
		if r := metav1.GetControllerOf(q); r != nil && q.Status.Phase != corev1.PodSucceeded && q.Status.Phase != corev1.PodFailed {
			count[r.UID]++
		}
	}
	replicas := map[types.UID]int32{}
	if c != nil {
		for _, w := range c.list {
			replicas[w.meta.UID] = w.replicas
		}
	}
	return func(p *corev1.Pod) bool {
		if p.DeletionTimestamp == nil || now.After(p.DeletionTimestamp.Add(stuckAfter)) {
			return true
		}
		if cand, ok := candidates[p.Labels[jobv1.LabelJob]]; ok && p.Labels[jobv1.LabelRole] == "worker" {
			return ordinal(p.Name) < cand.spec.Workers().Max+cand.spec.Spares
		}
		ref := metav1.GetControllerOf(p)
		if ref == nil {
			return false
		}
		want, followed := replicas[ref.UID]
		return !followed || count[ref.UID] <= want
	}
}

func listOrNil(inf cache.SharedIndexInformer) []any {
	if inf == nil {
		return nil
	}
	return inf.GetStore().List()
}
