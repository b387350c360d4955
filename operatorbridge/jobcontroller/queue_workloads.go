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

// jobWorkloads are a job's Workloads, from the cache.
type jobWorkloads struct {
	// current holds or waits for the job's admission.
	current *kueue.Workload
	// growth is a slice that asks to replace current at another size.
	growth *kueue.Workload
	// finished is one finished other than by a replacement, when current
	// is nil.
	finished *kueue.Workload
	// deleted is one a user deleted while it held the job's admission:
	// the job stops, and then its finalizer goes.
	deleted *kueue.Workload
}

// holdsAdmission reports whether a Workload is admitted, or was and must
// be given back (evicted): the one the job runs, or stops, by. One with
// quota reserved and admission checks pending does not, yet.
func holdsAdmission(wl *kueue.Workload) bool {
	p := admission.Read(wl).Phase
	return p == admission.Admitted || p == admission.Evicted
}

// workloadsOf reads a job's Workloads. An old slice Kueue replaced is let
// go; one it left admitted beside its replacement is finished; a Workload
// of the job that is none of the above (a slice whose admission is gone)
// is deleted, as is one deleted that holds no admission.
func (t *term) workloadsOf(ctx context.Context, u *unstructured.Unstructured) (jobWorkloads, error) {
	var set jobWorkloads
	objs, err := t.workloads.ByNamespace(u.GetNamespace()).List(labels.SelectorFromSet(labels.Set{jobv1.LabelJob: u.GetName()}))
	if err != nil {
		return set, err
	}
	var live []*kueue.Workload
	for _, o := range objs {
		obj, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var wl kueue.Workload
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &wl); err != nil {
			return set, fmt.Errorf("read Workload %s: %w", obj.GetName(), err)
		}
		if !owns(wl.OwnerReferences, u.GetUID()) {
			continue
		}
		st := admission.Read(&wl)
		switch {
		case wl.DeletionTimestamp != nil && holdsAdmission(&wl):
			set.deleted = &wl
		case wl.DeletionTimestamp != nil || st.Phase == admission.Finished && st.Reason == kueue.WorkloadSliceReplaced:
			if err := t.dropFinalizer(ctx, wl.Namespace, wl.Name); err != nil {
				return set, err
			}
		case st.Phase == admission.Finished:
			set.finished = &wl
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
	for _, wl := range live {
		if holdsAdmission(wl) {
			set.current = wl // the newest admitted: a replacement wins
		}
	}
	if set.current == nil && len(live) > 0 {
		set.current = live[0]
		for _, wl := range live {
			if admission.Replaces(wl) == "" {
				set.current = wl
				break
			}
		}
	}
	for _, wl := range live {
		switch {
		case wl == set.current:
		case holdsAdmission(wl) && admission.Replaces(set.current) == wl.Name:
			// Replaced; Kueue's scheduler did not finish it.
			next := wl.DeepCopy()
			admission.FinishReplaced(next, set.current.Name, time.Now())
			if err := t.updateWorkloadStatus(ctx, next); err != nil {
				return set, err
			}
		case !holdsAdmission(wl) && admission.Replaces(wl) == set.current.Name && set.growth == nil:
			set.growth = wl
		default:
			if err := t.deleteWorkload(ctx, wl); err != nil {
				return set, err
			}
		}
	}
	return set, nil
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

// forgetWorkloads deletes the Workloads of a job whose resource is gone,
// their finalizer first: its quota is released at once, not when the
// garbage collector comes to them. One of a resource of the same kind and
// name made again since (another UID) is left alone.
func (t *term) forgetWorkloads(ctx context.Context, k *servedKind, ns, name string) error {
	if t.workloads == nil {
		return nil
	}
	var live types.UID
	if u, err := t.cfg.Dynamic.Resource(k.Resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		live = u.GetUID()
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get %s %s: %w", k.Name, name, err)
	}
	return t.deleteWorkloadsOf(ctx, k, ns, name, func(uid types.UID) bool { return uid != live })
}

// deleteWorkloadsOf deletes, finalizer first, the Workloads of the job of
// kind k named name whose owner's UID whose says.
func (t *term) deleteWorkloadsOf(ctx context.Context, k *servedKind, ns, name string, whose func(types.UID) bool) error {
	if t.workloads == nil {
		return nil
	}
	objs, err := t.workloads.ByNamespace(ns).List(labels.SelectorFromSet(labels.Set{jobv1.LabelJob: name}))
	if err != nil {
		return nil
	}
	for _, o := range objs {
		obj, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		ref := metav1.GetControllerOf(obj)
		if ref == nil || ref.Kind != k.Name || ref.Name != name || !whose(ref.UID) {
			continue
		}
		var wl kueue.Workload
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &wl); err != nil {
			return err
		}
		if err := t.deleteWorkload(ctx, &wl); err != nil {
			return err
		}
	}
	return nil
}
