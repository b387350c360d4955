package kubeautoscale

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
)

// expectFor is how long after a workload's controller was asked for more
// pods the ones it has not created yet are counted as pending. A pod its
// controller cannot create (a quota, an admission webhook) stops taking
// room after that.
const expectFor = 30 * time.Second

// expectations are the pods that workloads' controllers are about to
// create: a ReplicaSet (a Deployment's, an HPA's) or a StatefulSet whose
// spec.replicas exceeds the pods it has. The autoscaler makes room for
// them from the moment the controller is asked, not once its pods exist,
// fail to schedule and are backed off by the scheduler: a workload of a
// higher priority scaling up is not slowed down by the training jobs
// (EDL's was). The elastic jobs' own StatefulSets are the jobs' demand and
// are left out.
type expectations struct {
	replicaSets  cache.SharedIndexInformer
	statefulSets cache.SharedIndexInformer
	classes      cache.SharedIndexInformer

	mu     sync.Mutex
	raised map[types.UID]time.Time // when each controller last asked for more pods
}

// newExpectations adds the informers it can use to factory: those the
// autoscaler's RBAC lets it list. Without them it expects nothing, and
// says so once.
func newExpectations(ctx context.Context, kube kubernetes.Interface, factory informers.SharedInformerFactory, poke func(), warn func(string, ...any)) *expectations {
	e := &expectations{raised: map[types.UID]time.Time{}}
	can := func(what string, list func() error) bool {
		err := list()
		if apierrors.IsForbidden(err) {
			warn("cannot list "+what+": pods their controllers are about to create get no room before they exist (deploy/autoscaler's ClusterRole grants it)", "error", err)
			return false
		}
		return true
	}
	one := metav1.ListOptions{Limit: 1}
	if can("replicasets", func() error { _, err := kube.AppsV1().ReplicaSets("").List(ctx, one); return err }) {
		e.replicaSets = factory.Apps().V1().ReplicaSets().Informer()
		e.follow(e.replicaSets, poke)
	}
	if can("statefulsets", func() error { _, err := kube.AppsV1().StatefulSets("").List(ctx, one); return err }) {
		e.statefulSets = factory.Apps().V1().StatefulSets().Informer()
		e.follow(e.statefulSets, poke)
	}
	if can("priorityclasses", func() error { _, err := kube.SchedulingV1().PriorityClasses().List(ctx, one); return err }) {
		e.classes = factory.Scheduling().V1().PriorityClasses().Informer()
	}
	return e
}

// synced are the informers' HasSynced, to wait for.
func (e *expectations) synced() []cache.InformerSynced {
	var out []cache.InformerSynced
	for _, inf := range []cache.SharedIndexInformer{e.replicaSets, e.statefulSets, e.classes} {
		if inf != nil {
			out = append(out, inf.HasSynced)
		}
	}
	return out
}

// follow notes when a controller is created or asked for more pods, and
// pokes a pass.
func (e *expectations) follow(inf cache.SharedIndexInformer, poke func()) {
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if m, ok := obj.(metav1.Object); ok {
				e.noteRaised(m.GetUID())
			}
			poke()
		},
		UpdateFunc: func(old, obj any) {
			if replicasOf(obj) > replicasOf(old) {
				e.noteRaised(obj.(metav1.Object).GetUID())
				poke()
			}
		},
		DeleteFunc: func(obj any) {
			if m, ok := obj.(metav1.Object); ok {
				e.mu.Lock()
				delete(e.raised, m.GetUID())
				e.mu.Unlock()
			}
		},
	})
}

func (e *expectations) noteRaised(uid types.UID) {
	e.mu.Lock()
	e.raised[uid] = time.Now()
	e.mu.Unlock()
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

// pods returns the pods the controllers are about to create (expectedPods).
func (e *expectations) pods(existing []*corev1.Pod, now time.Time) []*corev1.Pod {
	if e == nil || (e.replicaSets == nil && e.statefulSets == nil) {
		return nil
	}
	var workloads []workload
	for _, obj := range listOrNil(e.replicaSets) {
		if rs, ok := obj.(*appsv1.ReplicaSet); ok {
			workloads = append(workloads, workload{"replicaset", rs.ObjectMeta, replicasOf(rs), rs.Spec.Template})
		}
	}
	for _, obj := range listOrNil(e.statefulSets) {
		if sts, ok := obj.(*appsv1.StatefulSet); ok {
			workloads = append(workloads, workload{"statefulset", sts.ObjectMeta, replicasOf(sts), sts.Spec.Template})
		}
	}
	var classes []*schedulingv1.PriorityClass
	for _, obj := range listOrNil(e.classes) {
		if pc, ok := obj.(*schedulingv1.PriorityClass); ok {
			classes = append(classes, pc)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return expectedPods(workloads, classes, existing, e.raised, now)
}

// expectedPods are pending pods without a node for the pods the workloads
// are about to create: each one's replicas less the pods it has that are
// not finished or being deleted, for expectFor after it last asked for
// more (raised). The elastic jobs' own workloads are left out.
func expectedPods(workloads []workload, classes []*schedulingv1.PriorityClass, existing []*corev1.Pod, raised map[types.UID]time.Time, now time.Time) []*corev1.Pod {
	have := map[types.UID]int32{}
	for _, p := range existing {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if ref := metav1.GetControllerOf(p); ref != nil {
			have[ref.UID]++
		}
	}
	var out []*corev1.Pod
	for _, w := range workloads {
		if w.meta.DeletionTimestamp != nil || w.template.Labels[labelJob] != "" {
			continue
		}
		at, ok := raised[w.meta.UID]
		if !ok || now.Sub(at) > expectFor {
			continue
		}
		for i := range w.replicas - have[w.meta.UID] {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.meta.Namespace,
				Name: fmt.Sprintf("%s/%s (to be created, %d)", w.kind, w.meta.Name, i+1)}, Spec: *w.template.Spec.DeepCopy()}
			pod.Spec.Priority = priorityOf(&w.template.Spec, classes)
			out = append(out, pod)
		}
	}
	return out
}

// priorityOf resolves a pod template's priority as the API server's
// admission does for its pods: its class's value, or the default class's.
func priorityOf(spec *corev1.PodSpec, classes []*schedulingv1.PriorityClass) *int32 {
	if spec.Priority != nil {
		return spec.Priority
	}
	var value int32
	for _, pc := range classes {
		switch {
		case spec.PriorityClassName != "":
			if pc.Name == spec.PriorityClassName {
				return &pc.Value
			}
		case pc.GlobalDefault:
			value = pc.Value
		}
	}
	return &value
}

func listOrNil(inf cache.SharedIndexInformer) []any {
	if inf == nil {
		return nil
	}
	return inf.GetStore().List()
}
