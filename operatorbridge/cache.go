package operatorbridge

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge/controller"
)

// kubeCache watches the pods and workloads that carry a job label.
type kubeCache struct {
	informers *controller.Informers
	pods      corelisters.PodLister
	synced    []cache.InformerSynced
	workloads map[schema.GroupVersionResource]cache.GenericLister
	errors    controller.WatchErrors
}

// workload is one object that runs a role of a job.
type workload struct {
	gvr schema.GroupVersionResource
	obj *unstructured.Unstructured
}

func (w workload) String() string { return fmt.Sprintf("%s/%s", w.obj.GetKind(), w.obj.GetName()) }

func startKubeCache(ctx context.Context, b *Bridge, onPod func(old, pod *corev1.Pod, deleted bool), onWorkload func(job string)) (*kubeCache, error) {
	c := &kubeCache{
		informers: controller.NewInformers(b.cfg.Clients, jobv1.LabelJob, jobv1.LabelJob),
		workloads: map[schema.GroupVersionResource]cache.GenericLister{},
		errors:    controller.WatchErrors{Namespace: b.cfg.Namespace},
	}
	podInformer := c.informers.Typed.Core().V1().Pods()
	if err := podInformer.Informer().SetWatchErrorHandlerWithContext(c.errorHandler(b, "pods")); err != nil {
		return nil, err
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { onPod(nil, obj.(*corev1.Pod), false) },
		UpdateFunc: func(old, obj any) { onPod(old.(*corev1.Pod), obj.(*corev1.Pod), false) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				onPod(nil, pod, true)
			}
		},
	}); err != nil {
		return nil, err
	}
	c.pods = podInformer.Lister()
	c.synced = append(c.synced, podInformer.Informer().HasSynced)

	for _, gvr := range b.cfg.Workloads {
		inf := c.informers.Dynamic.ForResource(gvr)
		if err := inf.Informer().SetWatchErrorHandlerWithContext(c.errorHandler(b, resourceName(gvr))); err != nil {
			return nil, err
		}
		if _, err := inf.Informer().AddEventHandler(controller.OnObject(func(m metav1.Object) {
			if job := m.GetLabels()[jobv1.LabelJob]; job != "" {
				onWorkload(job)
			}
		})); err != nil {
			return nil, err
		}
		c.workloads[gvr] = inf.Lister()
		c.synced = append(c.synced, inf.Informer().HasSynced)
	}
	c.informers.Start()

	// Wait a little for the caches; a cache that cannot fill (RBAC, say) is
	// reported by reconcile, not waited for.
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cache.WaitForCacheSync(waitCtx.Done(), c.synced...)
	return c, nil
}

func (c *kubeCache) errorHandler(b *Bridge, resource string) cache.WatchErrorHandlerWithContext {
	return c.errors.Handler(resource, func(err error) {
		b.logger.Error("kubernetes watch failed", "resource", resource, "error", err)
	})
}

// problem is why the caches are not filled yet, or "".
func (c *kubeCache) problem() string {
	for _, synced := range c.synced {
		if !synced() {
			if msg := c.errors.First(); msg != "" {
				return msg
			}
			return "waiting for the pod and workload caches"
		}
	}
	return ""
}

// workloadsOf returns the job's workloads of a role in the cache's
// namespaces, oldest first.
func (c *kubeCache) workloadsOf(job string, role membership.Role) []workload {
	sel := labels.SelectorFromSet(labels.Set{jobv1.LabelJob: job, jobv1.LabelRole: string(role)})
	var out []workload
	for gvr, lister := range c.workloads {
		objs, err := lister.List(sel)
		if err != nil {
			continue
		}
		for _, o := range objs {
			if u, ok := o.(*unstructured.Unstructured); ok {
				out = append(out, workload{gvr: gvr, obj: u})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ti, tj := out[i].obj.GetCreationTimestamp(), out[j].obj.GetCreationTimestamp()
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return out[i].obj.GetName() < out[j].obj.GetName()
	})
	return out
}

func (c *kubeCache) stop() { c.informers.Stop() }
