package autoscaler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestOnlyOtherWorkloadsReplicaSetPodsAreSteered(t *testing.T) {
	owned := func(p *corev1.Pod, kind, name string) *corev1.Pod {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, Controller: &yes}}
		return p
	}
	web := owned(pod("web-1", "", "", "a-0", corev1.PodRunning, "3"), "ReplicaSet", "web-7d9")
	theirs := owned(pod("web-2", "", "", "a-0", corev1.PodRunning, "3"), "ReplicaSet", "web-7d9")
	theirs.Annotations = map[string]string{annotationDeletionCost: "10"}
	ours := owned(pod("web-3", "", "", "a-1", corev1.PodRunning, "3"), "ReplicaSet", "web-7d9")
	ours.Annotations = map[string]string{annotationDeletionCost: "133001", annotationCostSet: "133001"}
	going := owned(pod("web-4", "", "", "a-1", corev1.PodRunning, "3"), "ReplicaSet", "web-7d9")
	going.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	unbound := owned(pod("web-5", "", "", "", corev1.PodPending, "3"), "ReplicaSet", "web-7d9")
	db := owned(pod("db-0", "", "", "a-0", corev1.PodRunning, "3"), "StatefulSet", "db")
	trainer := owned(pod("a-worker-0", "a", "worker", "a-0", corev1.PodRunning, "5"), "ReplicaSet", "x")
	bare := pod("lonely", "", "", "a-0", corev1.PodRunning, "1")

	got := replicaPods([]*corev1.Pod{web, theirs, ours, going, unbound, db, trainer, bare})
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
		assert.Equal(t, "ns/web-7d9", p.Owner)
		assert.Equal(t, int64(3000), p.Request.MilliCPU)
	}
	assert.Equal(t, []string{"ns/web-1", "ns/web-3"}, names,
		"bound ReplicaSet pods, not going, not a job's, with no cost or the one set here")
}
