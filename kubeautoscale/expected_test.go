package kubeautoscale

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestPodsAControllerIsAboutToCreateArePending(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	template := func(class string, labels map[string]string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{PriorityClassName: class,
			Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}}}
	}
	web := workload{"replicaset", metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "web"}, 4, template("high", nil)}
	batch := workload{"statefulset", metav1.ObjectMeta{Name: "batch", Namespace: "ns", UID: "batch"}, 2, template("", nil)}
	stale := workload{"replicaset", metav1.ObjectMeta{Name: "stale", Namespace: "ns", UID: "stale"}, 3, template("high", nil)}
	job := workload{"statefulset", metav1.ObjectMeta{Name: "train-worker", Namespace: "ns", UID: "train"}, 9,
		template("", map[string]string{labelJob: "train"})}
	owned := func(name string, uid types.UID) *corev1.Pod {
		p := pod(name, "", "", "n-0", corev1.PodRunning, "3")
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{UID: uid, Controller: &yes}}
		return p
	}
	going := owned("web-c", "web")
	going.DeletionTimestamp = &metav1.Time{}
	existing := []*corev1.Pod{owned("web-a", "web"), owned("web-b", "web"), going, owned("batch-0", "batch")}
	classes := []*schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000},
		{ObjectMeta: metav1.ObjectMeta{Name: "usual"}, Value: 10, GlobalDefault: true},
	}
	raised := map[types.UID]time.Time{"web": now.Add(-time.Second), "batch": now, "train": now, "stale": now.Add(-expectFor - time.Second)}

	got := expectedPods([]workload{web, batch, stale, job}, classes, existing, raised, now)
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
		assert.Empty(t, p.Spec.NodeName)
	}
	// web has two of four (one going does not count), batch one of two;
	// stale asked too long ago, train is an elastic job's own.
	assert.Equal(t, []string{"replicaset/web (to be created, 1)", "replicaset/web (to be created, 2)", "statefulset/batch (to be created, 1)"}, names)
	require.Len(t, got, 3)
	assert.Equal(t, int32(1000), *got[0].Spec.Priority, "its class's value")
	assert.Equal(t, int32(10), *got[2].Spec.Priority, "the default class's value")
	assert.Equal(t, int64(3000), podRequest(got[0]).MilliCPU)
}
