package admission

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

func request() Request {
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Name: "dropped", Labels: map[string]string{"app": "t"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "t"}}},
	}
	return Request{
		Owner:     metav1.OwnerReference{APIVersion: "elastictraining.io/v1", Kind: "ElasticJob", Name: "a", UID: "uid-a"},
		Namespace: "ns", Labels: map[string]string{"elastic.job": "a"}, Queue: "training",
		Priority: &Priority{Class: "research", Value: 100},
		PodSets:  []PodSet{{Name: "worker", Count: 4, MinCount: 2, Template: tmpl}, {Name: "ps", Count: 1, MinCount: 1, Template: tmpl}},
	}
}

// The Workload carries what Kueue's contract asks of an external kind.
func TestAWorkloadIsWhatKueueExpectsOfAnExternalKind(t *testing.T) {
	wl := request().Workload()
	assert.Equal(t, "elasticjob-a-"+WorkloadName("ElasticJob", "a", "uid-a")[len("elasticjob-a-"):], wl.Name)
	assert.Equal(t, map[string]string{"elastic.job": "a", JobUIDLabel: "uid-a"}, wl.Labels)
	assert.Equal(t, []string{Finalizer}, wl.Finalizers)
	require.Len(t, wl.OwnerReferences, 1)
	assert.True(t, *wl.OwnerReferences[0].Controller)
	assert.True(t, *wl.OwnerReferences[0].BlockOwnerDeletion)
	assert.Equal(t, kueue.LocalQueueName("training"), wl.Spec.QueueName)
	require.Len(t, wl.Spec.PodSets, 2)
	assert.Equal(t, int32(4), wl.Spec.PodSets[0].Count)
	assert.Equal(t, int32(2), *wl.Spec.PodSets[0].MinCount, "the workers from np's maximum down to its minimum")
	assert.Nil(t, wl.Spec.PodSets[1].MinCount, "minCount on one pod set only: a fixed role has none")
	assert.Empty(t, wl.Spec.PodSets[0].Template.Name, "a pod set's template keeps only labels and annotations")
	assert.Equal(t, "t", wl.Spec.PodSets[0].Template.Labels["app"])
	assert.Equal(t, kueue.NewWorkloadPriorityClassRef("research"), wl.Spec.PriorityClassRef)
	assert.Equal(t, int32(100), *wl.Spec.Priority)
	assert.True(t, request().Matches(wl))
	changed := request()
	changed.PodSets[0].Count = 3
	assert.False(t, changed.Matches(wl), "a request that changed does not match")
	assert.True(t, changed.Matches(changed.Update(wl)))
}

func condition(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: reason + " message"}
}

// A Workload's state: pending until admitted, admitted at its counts,
// evicted while it still holds the quota, released once the job stopped.
func TestAWorkloadsStateAndItsRelease(t *testing.T) {
	wl := request().Workload()
	assert.Equal(t, Pending, Read(wl).Phase)
	wl.Status.Conditions = []metav1.Condition{condition(kueue.WorkloadQuotaReserved, metav1.ConditionFalse, "Inadmissible")}
	assert.Equal(t, State{Phase: Pending, Reason: "Inadmissible", Message: "Inadmissible message"}, Read(wl))

	wl.Status.Admission = &kueue.Admission{ClusterQueue: "training", PodSetAssignments: []kueue.PodSetAssignment{
		{Name: "worker", Count: ptr[int32](3), Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{"cpu": "default", "memory": "default"}},
		{Name: "ps"}}}
	wl.Status.Conditions = []metav1.Condition{condition(kueue.WorkloadQuotaReserved, metav1.ConditionTrue, "QuotaReserved"),
		condition(kueue.WorkloadAdmitted, metav1.ConditionTrue, "Admitted")}
	s := Read(wl)
	assert.Equal(t, Admitted, s.Phase)
	assert.Equal(t, map[string]int32{"worker": 3, "ps": 1}, s.Counts, "a nil count is the pod set's")
	assert.Equal(t, []string{"default"}, s.Flavors["worker"])

	apimeta.SetStatusCondition(&wl.Status.Conditions, condition(kueue.WorkloadEvicted, metav1.ConditionTrue, kueue.WorkloadEvictedByPreemption))
	assert.Equal(t, Evicted, Read(wl).Phase, "evicted comes before admitted: the job must stop first")
	Release(wl, time.Now())
	assert.Nil(t, wl.Status.Admission)
	assert.True(t, apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadRequeued), "a preempted Workload is requeued")
	assert.True(t, apimeta.IsStatusConditionFalse(wl.Status.Conditions, kueue.WorkloadQuotaReserved))
	assert.True(t, apimeta.IsStatusConditionFalse(wl.Status.Conditions, kueue.WorkloadAdmitted))
	assert.Equal(t, Pending, Read(wl).Phase)

	deactivated := request().Workload()
	deactivated.Status.Conditions = []metav1.Condition{condition(kueue.WorkloadEvicted, metav1.ConditionTrue, kueue.WorkloadDeactivated)}
	Release(deactivated, time.Now())
	assert.True(t, apimeta.IsStatusConditionFalse(deactivated.Status.Conditions, kueue.WorkloadRequeued), "a deactivated one is not")

	Finish(wl, true, "all 2 workers succeeded", time.Now())
	assert.Equal(t, State{Phase: Finished, Reason: kueue.WorkloadFinishedReasonSucceeded, Message: "all 2 workers succeeded"}, Read(wl))
}

// Pods go on the admitted flavors; a flavor at odds with the pods' own
// node selector is said.
func TestPodsArePlacedOnTheAdmittedFlavors(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"zone": "a"}}}
	flavor := kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: kueue.ResourceFlavorSpec{
		NodeLabels:  map[string]string{"pool": "gpu"},
		Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}}
	require.NoError(t, Place(&tmpl, []kueue.ResourceFlavor{flavor}, []kueue.PodSetUpdate{{Name: "worker", Labels: map[string]string{"checked": "yes"}}}))
	assert.Equal(t, map[string]string{"zone": "a", "pool": "gpu"}, tmpl.Spec.NodeSelector)
	assert.Equal(t, flavor.Spec.Tolerations, tmpl.Spec.Tolerations)
	assert.Equal(t, "yes", tmpl.Labels["checked"])
	require.NoError(t, Place(&tmpl, []kueue.ResourceFlavor{flavor}, nil))
	assert.Len(t, tmpl.Spec.Tolerations, 1, "a toleration is added once")

	clash := corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"pool": "cpu"}}}
	assert.EqualError(t, Place(&clash, []kueue.ResourceFlavor{flavor}, nil),
		"ResourceFlavor gpu sets node label pool=gpu, and the pods' nodeSelector pool=cpu")
}

// A slice asks for the job at a fixed larger size in place of the
// admitted Workload; it names that one, and a slice given back its
// admission asks anew as the job's Workload.
func TestASliceReplacesTheAdmittedWorkload(t *testing.T) {
	r := request()
	current := r.Workload()
	slice := r.Slice(current, 4, time.Unix(1, 0))
	assert.NotEqual(t, current.Name, slice.Name)
	assert.Equal(t, current.Name, Replaces(slice))
	assert.Empty(t, Replaces(current))
	assert.Equal(t, int32(4), slice.Spec.PodSets[0].Count)
	assert.Nil(t, slice.Spec.PodSets[0].MinCount, "a slice cannot be admitted partially")
	assert.Equal(t, current.OwnerReferences, slice.OwnerReferences)
	assert.Equal(t, current.Labels, slice.Labels)
	assert.NotContains(t, r.Update(slice).Annotations, SliceReplacementFor)
	assert.Equal(t, int32(2), *r.Update(slice).Spec.PodSets[0].MinCount)

	FinishReplaced(current, slice.Name, time.Now())
	assert.Equal(t, State{Phase: Finished, Reason: kueue.WorkloadSliceReplaced, Message: "replaced by Workload " + slice.Name}, Read(current))
}

// Room counts whole pods in the quota left on the admitted flavor; none
// while other Workloads wait.
func TestRoomIsWholePodsOfTheQuotaLeft(t *testing.T) {
	cq := &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "training"},
		Spec: kueue.ClusterQueueSpec{ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{"cpu"},
			Flavors: []kueue.FlavorQuotas{{Name: "default", Resources: []kueue.ResourceQuota{{Name: "cpu", NominalQuota: resource.MustParse("4")}}}}}}},
		Status: kueue.ClusterQueueStatus{FlavorsReservation: []kueue.FlavorUsage{{Name: "default",
			Resources: []kueue.ResourceUsage{{Name: "cpu", Total: resource.MustParse("1500m")}}}}}}
	pod := PodRequest(corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": resource.MustParse("1")}}},
		{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"cpu": resource.MustParse("100m"), "memory": resource.MustParse("1Gi")}}},
	}}})
	assert.Equal(t, "1100m", pod.Cpu().String(), "a limit stands for a request left out")
	n, why := Room(cq, map[corev1.ResourceName]string{"cpu": "default"}, pod)
	assert.Equal(t, 2, n, "2500m free: two pods of 1100m")
	assert.Equal(t, "2500m of cpu free in flavor default of ClusterQueue training", why)
	cq.Status.PendingWorkloads = 1
	n, why = Room(cq, map[corev1.ResourceName]string{"cpu": "default"}, pod)
	assert.Zero(t, n)
	assert.Equal(t, "1 Workloads wait in ClusterQueue training", why)
}

// A scale-down gives back the quota of the pods beyond what the job keeps,
// only ever more of it, and the state counts what is left.
func TestReclaimGivesBackThePodsBeyondWhatTheJobKeeps(t *testing.T) {
	wl := request().Workload()
	assert.False(t, Reclaim(wl, "worker", 2), "nothing to give back before an admission")
	wl.Status.Admission = &kueue.Admission{ClusterQueue: "training", PodSetAssignments: []kueue.PodSetAssignment{{Name: "worker", Count: ptr[int32](4)}, {Name: "ps"}}}
	wl.Status.Conditions = []metav1.Condition{condition(kueue.WorkloadQuotaReserved, metav1.ConditionTrue, "QuotaReserved"),
		condition(kueue.WorkloadAdmitted, metav1.ConditionTrue, "Admitted")}
	require.True(t, Reclaim(wl, "worker", 3))
	assert.Equal(t, []kueue.ReclaimablePod{{Name: "worker", Count: 1}}, wl.Status.ReclaimablePods)
	require.True(t, Reclaim(wl, "worker", 2))
	assert.Equal(t, []kueue.ReclaimablePod{{Name: "worker", Count: 2}}, wl.Status.ReclaimablePods)
	assert.False(t, Reclaim(wl, "worker", 3), "Kueue refuses fewer: the job grows back by a slice")
	assert.Equal(t, int32(2), Read(wl).Counts["worker"])
}
