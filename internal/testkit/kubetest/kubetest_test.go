package kubetest_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
)

func TestStatefulSetPodsRunOnKwok(t *testing.T) {
	c, err := kubetest.Start(t.Context(), t.TempDir())
	if err != nil && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(c.Stop)

	labels := map[string]string{"app": "smoke"}
	replicas := int32(2)
	_, err = c.Client.AppsV1().StatefulSets("default").Create(t.Context(), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels}, PodManagementPolicy: appsv1.ParallelPodManagement,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:  []corev1.Container{{Name: "c", Image: "none"}},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		pods, err := c.Client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "app=smoke"})
		if err != nil || len(pods.Items) != 2 {
			return false
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				return false
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "pods never ran:\n%s\n%s", c.Logs("kwok", 20), c.Logs("kube-controller-manager", 20))
}

// The bin-packing profile puts pods on the fullest node they fit.
func TestTheBinPackingSchedulerFillsOneNodeFirst(t *testing.T) {
	c, err := kubetest.Start(t.Context(), t.TempDir())
	if err != nil && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(c.Stop)

	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	for _, name := range []string{"pack-a", "pack-b"} {
		_, err := c.Client.CoreV1().Nodes().Create(t.Context(), &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: map[string]string{"pool": "pack", "kubernetes.io/hostname": name}},
			Status: corev1.NodeStatus{Allocatable: capacity, Capacity: capacity},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		for _, name := range []string{"pack-a", "pack-b"} {
			n, err := c.Client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
			if err != nil || len(n.Spec.Taints) > 0 || !nodeReady(n) {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "the nodes never became ready")
	for i := range 3 {
		_, err := c.Client.CoreV1().Pods("default").Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("packed-%d", i), Labels: map[string]string{"app": "packed"}},
			Spec: corev1.PodSpec{SchedulerName: kubetest.BinPackingScheduler, NodeSelector: map[string]string{"pool": "pack"},
				Containers: []corev1.Container{{Name: "c", Image: "none", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		// One at a time, so that each is placed knowing where the last went.
		require.Eventually(t, func() bool {
			p, err := c.Client.CoreV1().Pods("default").Get(t.Context(), fmt.Sprintf("packed-%d", i), metav1.GetOptions{})
			return err == nil && p.Spec.NodeName != ""
		}, 60*time.Second, 50*time.Millisecond, "pod %d never scheduled:\n%s", i, c.Logs("kube-scheduler", 20))
	}
	pods, err := c.Client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "app=packed"})
	require.NoError(t, err)
	nodes := map[string]int{}
	for _, p := range pods.Items {
		nodes[p.Spec.NodeName]++
	}
	require.Len(t, nodes, 1, "pods spread over nodes: %v", nodes)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Kueue's manager runs beside the control plane: a suspended batch Job in
// a LocalQueue of a ClusterQueue with room is admitted, and Kueue's own
// integration starts it.
func TestKueueAdmitsAQueuedJob(t *testing.T) {
	c, err := kubetest.Start(t.Context(), t.TempDir())
	if err != nil && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	require.NoError(t, c.StartKueue(t.Context()), "%s", c.Logs("kueue", 30))
	queues := `
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: smoke}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: smoke}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [cpu]
      flavors:
        - name: smoke
          resources: [{name: cpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: smoke, namespace: default}
spec: {clusterQueue: smoke}
`
	_, errOut, err := c.Kubectl(t.Context(), t.TempDir(), queues, "apply", "-f", "-")
	require.NoError(t, err, errOut)
	job := `
apiVersion: batch/v1
kind: Job
metadata:
  name: smoke
  namespace: default
  labels: {kueue.x-k8s.io/queue-name: smoke}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: none, resources: {requests: {cpu: "1"}}}]
`
	_, errOut, err = c.Kubectl(t.Context(), t.TempDir(), job, "apply", "-f", "-")
	require.NoError(t, err, errOut)
	require.Eventually(t, func() bool {
		j, err := c.Client.BatchV1().Jobs("default").Get(t.Context(), "smoke", metav1.GetOptions{})
		return err == nil && j.Spec.Suspend != nil && !*j.Spec.Suspend
	}, 60*time.Second, 100*time.Millisecond, "Kueue never admitted the job:\n%s", c.Logs("kueue", 30))
}
