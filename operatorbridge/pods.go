package operatorbridge

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// podChanged evicts the node of a pod that is gone or failed, and keeps the
// pod's Service in Service mode. It runs in the informer's goroutine.
func (t *term) podChanged(old, pod *corev1.Pod, deleted bool) {
	job := pod.Labels[jobv1.LabelJob]
	if membership.ValidateJobID(job) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case deleted:
		t.evict(ctx, job, pod, "its pod was deleted")
		t.deleteService(ctx, pod)
		return
	case pod.Status.Phase == corev1.PodFailed && (old == nil || old.Status.Phase != corev1.PodFailed):
		t.evict(ctx, job, pod, "its pod failed")
	}
	if pod.Annotations[jobv1.AnnotationIntranet] == jobv1.IntranetService && pod.DeletionTimestamp == nil {
		t.ensureService(ctx, pod)
	}
}

// evict revokes the lease of the pod's node so that the coordinator moves
// on at once instead of after the lease's TTL. Only the node registered by
// this very pod (same UID) is evicted: a pod that replaces it under the
// same name may have registered already.
//
// It runs only once the pod is gone or has failed, never while it
// terminates: its sidecar may still be stopping the training processes, and
// the next generation must not start beside them. For the same reason an
// eviction is not an ack: unless Kubernetes says the pod's containers
// stopped, presence.Evict leaves a record that the coordinator waits out,
// for the node's own fence deadline to pass.
func (t *term) evict(ctx context.Context, job string, pod *corev1.Pod, why string) {
	resp, err := t.cfg.Etcd.Get(ctx, t.cfg.Keys.Nodes(job), clientv3.WithPrefix())
	if err != nil {
		t.logger.Warn("node of a gone pod not evicted", "job", job, "pod", pod.Name, "error", err)
		return
	}
	stopped := containersStopped(pod)
	for _, kv := range resp.Kvs {
		n, err := membership.DecodeNode(kv.Value)
		if err != nil || (n.Pod != pod.Name && n.ID != pod.Name) {
			continue
		}
		if n.PodUID != "" && n.PodUID != string(pod.UID) {
			continue // the node of a newer pod with the same name
		}
		err = presence.Evict(ctx, t.cfg.Etcd, t.cfg.Keys, presence.EvictRequest{
			Job: job, Node: n.ID, Lease: clientv3.LeaseID(kv.Lease), By: "bridge", Reason: why, StoppedForSure: stopped,
		})
		switch {
		case errors.Is(err, presence.ErrEvictionMoot):
			continue // it left, or registered again, meanwhile
		case err != nil:
			t.logger.Warn("node of a gone pod not evicted", "job", job, "node", n.ID, "error", err)
			continue
		}
		t.metrics.evictions.WithLabelValues(job).Inc()
		t.logger.Info("evicted node", "job", job, "node", n.ID, "why", why, "containers_stopped", stopped)
		t.Recorder.Eventf(pod, corev1.EventTypeNormal, "Evicted", "node %s left job %s: %s", n.ID, job, why)
	}
}

// containersStopped reports whether Kubernetes says that nothing of the pod
// runs any more: the pod ended (Succeeded or Failed), or every one of its
// containers is reported terminated. A pod deleted by force while it ran
// still shows running containers: its machine may be cut off with them
// running. So does one that PodGC marked Failed because its node object is
// gone: that is the control plane's word on the node, not the kubelet's on
// the containers.
func containersStopped(pod *corev1.Pod) bool {
	if (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) && !deletedByPodGC(pod) {
		return true
	}
	if len(pod.Status.ContainerStatuses) < len(pod.Spec.Containers) {
		return false // some container never reported
	}
	for _, statuses := range [][]corev1.ContainerStatus{
		pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses,
	} {
		for _, s := range statuses {
			if s.State.Terminated == nil {
				return false
			}
		}
	}
	return true
}

// deletedByPodGC reports whether PodGC failed the pod because its node
// object is gone.
func deletedByPodGC(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "DeletionByPodGC" {
			return true
		}
	}
	return false
}

// ensureService keeps a headless Service named after the pod that selects
// only this pod, owned by it so that it goes when the pod goes.
func (t *term) ensureService(ctx context.Context, pod *corev1.Pod) {
	if pod.Labels[statefulSetPodName] != pod.Name {
		t.logger.Warn("pod asks for a Service but has no label that selects it alone",
			"pod", pod.Name, "label", statefulSetPodName)
		return
	}
	services := t.cfg.Kube.CoreV1().Services(pod.Namespace)
	have, err := services.Get(ctx, pod.Name, metav1.GetOptions{})
	if err == nil && ownedBy(have.OwnerReferences, pod.UID) {
		return
	}
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace,
			Labels: map[string]string{jobv1.LabelJob: pod.Labels[jobv1.LabelJob]},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
			}},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{statefulSetPodName: pod.Name},
			// The sidecar resolves peers before they are ready.
			PublishNotReadyAddresses: true,
		},
	}
	switch {
	case apierrors.IsNotFound(err):
		_, err = services.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		// A Service left by an earlier pod of the same name.
		next := have.DeepCopy()
		next.OwnerReferences, next.Labels = want.OwnerReferences, want.Labels
		next.Spec.Selector, next.Spec.PublishNotReadyAddresses = want.Spec.Selector, true
		_, err = services.Update(ctx, next, metav1.UpdateOptions{})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.logger.Warn("service not written", "pod", pod.Name, "error", err)
		return
	}
	t.logger.Debug("service written", "pod", pod.Name)
}

// deleteService removes the Service of a deleted pod at once; the garbage
// collector would, through the owner reference, but later.
func (t *term) deleteService(ctx context.Context, pod *corev1.Pod) {
	if pod.Annotations[jobv1.AnnotationIntranet] != jobv1.IntranetService {
		return
	}
	services := t.cfg.Kube.CoreV1().Services(pod.Namespace)
	have, err := services.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || !ownedBy(have.OwnerReferences, pod.UID) {
		return
	}
	uid := have.UID
	err = services.Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		t.logger.Warn("service not deleted", "pod", pod.Name, "error", err)
	}
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, ref := range refs {
		if ref.UID == uid {
			return true
		}
	}
	return false
}
