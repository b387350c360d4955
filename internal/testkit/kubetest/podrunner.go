package kubetest

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Container is what a PodRunner runs for a pod: typically a real sidecar
// process on the host with the pod's name, IP and UID.
type Container interface {
	// Stop ends it, as the kubelet would when the pod is deleted.
	Stop()
}

// PodRunner stands in for the kubelet, which kwok does not run: for every
// Running pod with an IP that matches its selector it starts a Container,
// and stops it when the pod is deleted.
type PodRunner struct {
	start func(*corev1.Pod) (Container, error)
	fail  func(error)

	mu      sync.Mutex
	running map[string]Container // by pod UID
	names   map[string]string    // pod UID to name
	held    map[string]bool      // pod names whose container outlives the pod
	factory informers.SharedInformerFactory
	stopCh  chan struct{}
}

// StartPodRunner watches the pods of ns that match selector. fail receives
// the errors of start.
func StartPodRunner(kube kubernetes.Interface, ns, selector string, start func(*corev1.Pod) (Container, error), fail func(error)) (*PodRunner, error) {
	r := &PodRunner{start: start, fail: fail, running: map[string]Container{}, names: map[string]string{}, held: map[string]bool{},
		stopCh: make(chan struct{})}
	r.factory = informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := r.factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.sync(obj.(*corev1.Pod), false) },
		UpdateFunc: func(_, obj any) { r.sync(obj.(*corev1.Pod), false) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				r.sync(pod, true)
			}
		},
	}); err != nil {
		return nil, err
	}
	r.factory.Start(r.stopCh)
	return r, nil
}

func (r *PodRunner) sync(pod *corev1.Pod, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	uid := string(pod.UID)
	c, running := r.running[uid]
	switch {
	case deleted || pod.DeletionTimestamp != nil:
		if running && !r.held[pod.Name] {
			c.Stop()
			delete(r.running, uid)
		}
	case !running && pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "":
		c, err := r.start(pod)
		if err != nil {
			r.fail(fmt.Errorf("start the container of pod %s: %w", pod.Name, err))
			return
		}
		r.running[uid], r.names[uid] = c, pod.Name
	}
}

// Hold keeps the container of a pod running when the pod is deleted, as on
// a machine cut off from the cluster, and returns it.
func (r *PodRunner) Hold(podName string) (Container, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, c := range r.running {
		if r.names[uid] == podName {
			r.held[podName] = true
			return c, true
		}
	}
	return nil, false
}

// Stop stops watching and stops every container.
func (r *PodRunner) Stop() {
	close(r.stopCh)
	r.factory.Shutdown()
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, c := range r.running {
		c.Stop()
		delete(r.running, uid)
	}
}

// RunningPods counts the pods of ns matching selector that are Running and
// not being deleted, or returns -1 if the API server cannot say.
func RunningPods(ctx context.Context, kube kubernetes.Interface, ns, selector string) int {
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}
