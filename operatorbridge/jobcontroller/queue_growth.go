package jobcontroller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge/admission"
)

// A job admitted below its maximum grows within its queue through Kueue's
// workload slices: when its ClusterQueue has room for more of its workers
// and nothing else waits there, it asks for a slice of the larger size,
// and runs on at its size until Kueue admits the slice. Kueue has no way
// to ask only for what is free (a slice that does not fit may preempt
// Workloads of a lower priority, as Kueue's own elastic Jobs do), so a
// slice not admitted within growthWait is withdrawn.
const (
	// growthWait is how long a slice may wait for its admission.
	growthWait = 10 * time.Second
	// growthPoll is how often a job below its maximum looks for room:
	// nothing the controller watches says when quota frees up.
	growthPoll = 5 * time.Second
)

// grow asks Kueue for a larger slice of an admitted job when its queue
// has room, or withdraws one that waited too long; v says so and when to
// look again.
func (t *term) grow(ctx context.Context, u *unstructured.Unstructured, req admission.Request, current, growth *kueue.Workload, st admission.State, v *queueView) error {
	var want int32
	var worker corev1.PodTemplateSpec
	for _, ps := range req.PodSets {
		if ps.Name == string(membership.RoleWorker) {
			want, worker = ps.Count, ps.Template
		}
	}
	have := st.Counts[string(membership.RoleWorker)]
	if have > want {
		return t.shrink(ctx, u, current, want, v)
	}
	if have == want {
		return nil
	}
	if growth != nil {
		if age := time.Since(growth.CreationTimestamp.Time); age < growthWait {
			v.recheck = growthWait - age
			v.message += fmt.Sprintf("; asking for %d worker pods (Workload %s)", workerCount(growth), growth.Name)
			return nil
		}
		v.recheck = growthPoll
		return t.withdraw(ctx, u, growth, fmt.Sprintf("not admitted within %s", growthWait))
	}
	v.recheck = growthPoll
	if c := apimeta.FindStatusCondition(current.Status.Conditions, kueue.WorkloadQuotaReserved); c != nil {
		// The ClusterQueue's status counts an admission a moment after
		// it: room reckoned sooner would count this job's own as free.
		if since := time.Since(c.LastTransitionTime.Time); since < growthPoll {
			v.recheck = growthPoll - since
			return nil
		}
	}
	room, why, err := t.room(ctx, u.GetNamespace(), req.Queue, st, worker)
	if err != nil {
		t.logger.Debug("no room reckoned for growth", "job", u.GetName(), "error", err)
		return nil
	}
	if room < 1 {
		return nil
	}
	to := min(want, have+int32(room))
	slice := req.Slice(current, to, time.Now())
	if err := t.createWorkload(ctx, slice); err != nil {
		return err
	}
	v.recheck = growthWait
	t.logger.Info("asking Kueue to grow the job", "job", u.GetName(), "from", have, "to", to, "workload", slice.Name, "room", why)
	t.Recorder.Eventf(u, corev1.EventTypeNormal, "Growing", "%s: asking for %d worker pods (Workload %s, replacing %s); the job runs at %d until Kueue admits it",
		why, to, slice.Name, current.Name, have)
	return nil
}

// room is how many more worker pods the job's ClusterQueue has room for,
// on the flavors its workers were admitted on, and what that is.
func (t *term) room(ctx context.Context, ns, queue string, st admission.State, worker corev1.PodTemplateSpec) (int, string, error) {
	lq, err := t.cfg.Dynamic.Resource(admission.LocalQueues).Namespace(ns).Get(ctx, queue, metav1.GetOptions{})
	if err != nil {
		return 0, "", err
	}
	name, _, _ := unstructured.NestedString(lq.Object, "spec", "clusterQueue")
	obj, err := t.cfg.Dynamic.Resource(admission.ClusterQueues).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, "", err
	}
	var cq kueue.ClusterQueue
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &cq); err != nil {
		return 0, "", err
	}
	n, why := admission.Room(&cq, st.ResourceFlavors[string(membership.RoleWorker)], admission.PodRequest(worker))
	return n, why, nil
}

// withdraw deletes a slice that will not be admitted.
func (t *term) withdraw(ctx context.Context, u *unstructured.Unstructured, growth *kueue.Workload, why string) error {
	if err := t.deleteWorkload(ctx, growth); err != nil {
		return err
	}
	t.Recorder.Eventf(u, corev1.EventTypeNormal, "GrowthWithdrawn", "Workload %s: %s", growth.Name, why)
	return nil
}

// recheckAfter asks for the job to be looked at again after a while.
type recheckAfter time.Duration

func (r recheckAfter) Error() string { return fmt.Sprintf("look again in %s", time.Duration(r)) }

// workerCount is the worker pods a Workload asks for.
func workerCount(wl *kueue.Workload) int32 {
	for _, ps := range wl.Spec.PodSets {
		if string(ps.Name) == string(membership.RoleWorker) {
			return ps.Count
		}
	}
	return 0
}

// shrink gives back the quota of the worker pods an admitted job no
// longer asks for, as Kueue's batch Job gives back that of its finished
// pods: the Workload's reclaimablePods. Kueue refuses a smaller count on a
// Workload that holds quota, so the job asks again, by a slice, to grow
// back.
func (t *term) shrink(ctx context.Context, u *unstructured.Unstructured, current *kueue.Workload, want int32, v *queueView) error {
	next := current.DeepCopy()
	if !admission.Reclaim(next, string(membership.RoleWorker), want) {
		return nil
	}
	if err := t.updateWorkloadStatus(ctx, next); err != nil {
		v.problem = fmt.Sprintf("Workload %s keeps the quota of more worker pods than the job's %d: %v", current.Name, want, err)
		return nil
	}
	t.Recorder.Eventf(u, corev1.EventTypeNormal, "Shrinking", "Workload %s: the quota of worker pods beyond %d given back: the job no longer asks for them", current.Name, want)
	return nil
}
