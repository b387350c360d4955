package jobcontroller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge/admission"
)

// jobWorkloads are a job's Workloads from the cache: current, the one
// that holds or waits for its admission; growth, a slice that asks to
// replace current at a larger size, if any; finished, one finished other
// than by a replacement, if current is nil. An old slice Kueue replaced
// is let go; one it left admitted beside its replacement is finished; a
// Workload of the job that is none of these (a slice whose admission is
// gone) is deleted.
func (t *term) jobWorkloads(ctx context.Context, u *unstructured.Unstructured) (current, growth, finished *kueue.Workload, err error) {
	objs, err := t.workloads.ByNamespace(u.GetNamespace()).List(labels.SelectorFromSet(labels.Set{jobv1.LabelJob: u.GetName()}))
	if err != nil {
		return nil, nil, nil, err
	}
	var live []*kueue.Workload
	for _, o := range objs {
		obj, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var wl kueue.Workload
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &wl); err != nil {
			return nil, nil, nil, fmt.Errorf("read Workload %s: %w", obj.GetName(), err)
		}
		if !owns(wl.OwnerReferences, u.GetUID()) || wl.DeletionTimestamp != nil {
			continue
		}
		st := admission.Read(&wl)
		switch {
		case st.Phase == admission.Finished && st.Reason == kueue.WorkloadSliceReplaced:
			if err := t.dropFinalizer(ctx, wl.Namespace, wl.Name); err != nil {
				return nil, nil, nil, err
			}
		case st.Phase == admission.Finished:
			finished = &wl
		default:
			live = append(live, &wl)
		}
	}
	slices.SortFunc(live, func(a, b *kueue.Workload) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return len(a.Name) - len(b.Name) // the base name is the shortest
	})
	reserved := func(wl *kueue.Workload) bool { return wl.Status.Admission != nil }
	for _, wl := range live {
		if reserved(wl) {
			current = wl // the newest reserved: a replacement wins
		}
	}
	if current == nil && len(live) > 0 {
		current = live[0]
		for _, wl := range live {
			if admission.Replaces(wl) == "" {
				current = wl
				break
			}
		}
	}
	for _, wl := range live {
		switch {
		case wl == current:
		case reserved(wl) && admission.Replaces(current) == wl.Name:
			// Replaced; Kueue's scheduler did not finish it.
			next := wl.DeepCopy()
			admission.FinishReplaced(next, current.Name, time.Now())
			if err := t.updateWorkloadStatus(ctx, next); err != nil {
				return nil, nil, nil, err
			}
		case !reserved(wl) && admission.Replaces(wl) == current.Name && growth == nil:
			growth = wl
		default:
			if err := t.deleteWorkload(ctx, wl); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	return current, growth, finished, nil
}

// createWorkload creates a Workload.
func (t *term) createWorkload(ctx context.Context, wl *kueue.Workload) error {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(wl)
	if err != nil {
		return err
	}
	_, err = t.cfg.Dynamic.Resource(admission.Workloads).Namespace(wl.Namespace).Create(ctx, &unstructured.Unstructured{Object: raw}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cannot create Workload %s: %w", wl.Name, err)
	}
	return nil
}

// deleteWorkload deletes a Workload that holds no quota, its finalizer
// first.
func (t *term) deleteWorkload(ctx context.Context, wl *kueue.Workload) error {
	if err := t.dropFinalizer(ctx, wl.Namespace, wl.Name); err != nil {
		return err
	}
	uid := wl.UID
	err := t.cfg.Dynamic.Resource(admission.Workloads).Namespace(wl.Namespace).Delete(ctx, wl.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Workload %s: %w", wl.Name, err)
	}
	return nil
}

// updateWorkloadStatus writes a Workload's status.
func (t *term) updateWorkloadStatus(ctx context.Context, wl *kueue.Workload) error {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(wl)
	if err != nil {
		return err
	}
	if _, err := t.cfg.Dynamic.Resource(admission.Workloads).Namespace(wl.Namespace).
		UpdateStatus(ctx, &unstructured.Unstructured{Object: raw}, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update the status of Workload %s: %w", wl.Name, err)
	}
	return nil
}

// stoppedAndGone reports whether an evicted job has stopped: its
// generation stopped (phase Suspended) and no pod of it is left.
func (t *term) stoppedAndGone(u *unstructured.Unstructured, j *Job, rec membership.JobRecords) bool {
	if rec.Status == nil || rec.Status.Phase != membership.JobSuspended || rec.Spec == nil || !rec.Spec.Suspend {
		return false
	}
	for _, r := range j.Roles {
		s, err := t.sets.StatefulSets(u.GetNamespace()).Get(StatefulSetName(j.ID, r.Name))
		if err == nil && owns(s.OwnerReferences, u.GetUID()) && (s.Status.Replicas > 0 || (s.Spec.Replicas != nil && *s.Spec.Replicas > 0)) {
			return false
		}
	}
	return true
}

// releaseWorkload gives an evicted Workload's quota back.
func (t *term) releaseWorkload(ctx context.Context, u *unstructured.Unstructured, wl *kueue.Workload, st admission.State) error {
	next := wl.DeepCopy()
	admission.Release(next, time.Now())
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(next)
	if err != nil {
		return err
	}
	if _, err := t.cfg.Dynamic.Resource(admission.Workloads).Namespace(wl.Namespace).
		UpdateStatus(ctx, &unstructured.Unstructured{Object: raw}, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("release the quota of Workload %s: %w", wl.Name, err)
	}
	t.logger.Info("quota released: the evicted job stopped", "job", u.GetName(), "workload", wl.Name, "reason", st.Reason)
	t.Recorder.Eventf(u, corev1.EventTypeNormal, "QuotaReleased", "Workload %s: the job stopped, its state saved; requeued (%s)", wl.Name, st.Reason)
	return nil
}

// finishWorkload marks the Workload of a job that ended finished and
// lets it go.
func (t *term) finishWorkload(ctx context.Context, wl *kueue.Workload, st admission.State, status *membership.Status) error {
	res := t.cfg.Dynamic.Resource(admission.Workloads).Namespace(wl.Namespace)
	if st.Phase != admission.Finished {
		next := wl.DeepCopy()
		admission.Finish(next, status.Phase == membership.JobSucceeded, status.Message, time.Now())
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(next)
		if err != nil {
			return err
		}
		if _, err := res.UpdateStatus(ctx, &unstructured.Unstructured{Object: raw}, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("finish Workload %s: %w", wl.Name, err)
		}
		return nil // the watch brings the finished Workload back
	}
	return t.dropFinalizer(ctx, wl.Namespace, wl.Name)
}

// dropFinalizer takes the resource-in-use finalizer off a Workload.
func (t *term) dropFinalizer(ctx context.Context, ns, name string) error {
	obj, err := t.workloads.ByNamespace(ns).Get(name)
	if err != nil {
		return nil
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	var keep []string
	for _, f := range m.GetFinalizers() {
		if f != admission.Finalizer {
			keep = append(keep, f)
		}
	}
	if len(keep) == len(m.GetFinalizers()) {
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"finalizers":%s,"resourceVersion":%q}}`, jsonList(keep), m.GetResourceVersion())
	_, err = t.cfg.Dynamic.Resource(admission.Workloads).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the finalizer of Workload %s: %w", name, err)
	}
	return nil
}

// forgetWorkloads lets the Workloads of a job whose resource is gone go:
// the garbage collector deletes them once their finalizer is off.
func (t *term) forgetWorkloads(ctx context.Context, ns, name string) error {
	if t.workloads == nil {
		return nil
	}
	objs, err := t.workloads.ByNamespace(ns).List(labels.SelectorFromSet(labels.Set{jobv1.LabelJob: name}))
	if err != nil {
		return nil
	}
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok {
			if err := t.dropFinalizer(ctx, ns, m.GetName()); err != nil {
				return err
			}
		}
	}
	return nil
}
