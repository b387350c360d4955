package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
)

// TestTheAutoscalerMakesRoomForAHigherPriorityAndGrowsBack is the seed's
// case 2 made small: two elastic jobs (1 to 6 workers of 4 CPU) on three
// 12-CPU nodes of their own, and a web Deployment of a higher priority
// (3 CPU a pod) that comes and goes. The jobs grow into the nine workers'
// room, shrink so that the web pods run, and grow back when they leave,
// never below their minimum. It asserts what the autoscaler does, not how
// fast.
func TestTheAutoscalerMakesRoomForAHigherPriorityAndGrowsBack(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, autoscale: true,
		bridgeArgs: []string{"--autoscale-cooldown", "2s", "--autoscale-period", "5s"},
		toyEnv:     []string{"TOY_STEPS=1000000", "TOY_INTERVAL=0.2"}})
	applyCRDs(t, e.c, e.dyn)
	pool := e.ns
	e.addPoolNodes(pool, 3, "12")
	high := e.webPriorityClass(pool)

	jobs := []string{"a", "b"}
	for _, name := range jobs {
		require.NoError(t, e.createJob(autoscaledJobYAML(name, pool)))
	}
	// Every 20 ms, no job asked to run below its minimum of one.
	var mu sync.Mutex
	var belowMin []string
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, name := range jobs {
				if r, ok := e.workerReplicas(name); ok && r < 1 {
					mu.Lock()
					belowMin = append(belowMin, fmt.Sprintf("%s at %d", name, r))
					mu.Unlock()
				}
			}
		}
	}()

	// The jobs grow into the room: nine workers in all, each running.
	e.waitWorkers(jobs, "the jobs fill the nine workers' room", func(total int) bool { return total == 9 })

	// Four web pods of a higher priority need 12 CPU: the jobs give room
	// as soon as the web ReplicaSet is asked for them, before they exist
	// (a quota on their priority class holds them back here, so that the
	// room cannot have been made for the pods themselves).
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "hold-web"}, Spec: corev1.ResourceQuotaSpec{
		Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")},
		ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
			ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{high.Name}}}},
	}}
	_, err := e.c.Client.CoreV1().ResourceQuotas(e.ns).Create(t.Context(), quota, metav1.CreateOptions{})
	require.NoError(t, err)
	// The quota holds once the controller-manager has counted it; before
	// that, a loaded API server may admit a pod past it.
	require.Eventually(t, func() bool {
		q, err := e.c.Client.CoreV1().ResourceQuotas(e.ns).Get(t.Context(), quota.Name, metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil
	}, 30*time.Second, 20*time.Millisecond, "the quota was never counted")
	web := e.webDeployment(pool, high.Name, 4)
	e.waitWorkers(jobs, "the jobs make room for the web pods to come", func(total int) bool { return total <= 6 && total >= 2 })
	assert.Zero(t, kubetest.RunningPods(t.Context(), e.c.Client, e.ns, "app=web"), "the quota holds the web pods back")
	assert.Eventually(t, func() bool {
		events, err := e.c.Client.CoreV1().Events(e.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=Autoscaled"})
		return err == nil && hasEvent(events.Items, "Autoscaled", "(to be created, ")
	}, 10*time.Second, 50*time.Millisecond, "the room was made for pods not yet created")
	// The quota goes, and the ReplicaSet is nudged to try again at once
	// (it backs off after refusals): every web pod runs.
	require.NoError(t, e.c.Client.CoreV1().ResourceQuotas(e.ns).Delete(t.Context(), quota.Name, metav1.DeleteOptions{}))
	rsList, err := e.c.Client.AppsV1().ReplicaSets(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=web"})
	require.NoError(t, err)
	for _, rs := range rsList.Items {
		_, err := e.c.Client.AppsV1().ReplicaSets(e.ns).Patch(t.Context(), rs.Name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"test/nudge":"1"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return kubetest.RunningPods(t.Context(), e.c.Client, e.ns, "app=web") == 4 },
		120*time.Second, 50*time.Millisecond, "the web pods never all ran:\n%s", e.bridge.out)
	e.waitWorkers(jobs, "the jobs keep to the room the web pods leave", func(total int) bool { return total <= 6 && total >= 2 })

	// The web pods go: the jobs grow back.
	e.scaleDeployment(web, 0)
	e.waitWorkers(jobs, "the jobs grow back into the nine workers' room", func(total int) bool { return total == 9 })

	close(stop)
	<-sampled
	mu.Lock()
	assert.Empty(t, belowMin, "a job was asked to run below its minimum")
	mu.Unlock()

	code, stdout, stderr := cli(t, nil, "status", "--etcd-endpoints", e.etcd.Endpoint(), "--job", "a")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "Autoscaler: ")
	events, err := e.c.Client.CoreV1().Events(e.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=Autoscaled"})
	require.NoError(t, err)
	assert.NotEmpty(t, events.Items, "the autoscaler's decisions are Events on the jobs")
}

// autoscaledJobYAML is an ElasticJob of 1 to 6 workers of 4 CPU, on the
// pool's nodes only.
func autoscaledJobYAML(name, pool string) string {
	return fmt.Sprintf(`
apiVersion: elastictraining.io/v1
kind: ElasticJob
metadata:
  name: %s
spec:
  worker:
    replicas: 1
    minReplicas: 1
    maxReplicas: 6
    template:
      spec:
        nodeSelector: {elastic-test: %s}
        tolerations: [{key: elastic-test, operator: Equal, value: %s, effect: NoSchedule}]
        containers:
          - name: trainer
            image: trainer:v1
            command: [%s]
            resources: {requests: {cpu: "4", memory: 1Gi}}
`, name, pool, pool, filepath.Join(repoRoot, "testdata", "toytrainer.sh"))
}

// addPoolNodes registers kwok nodes of the given CPUs, labelled and
// tainted elastic-test=pool so that only the pool's pods go there.
func (e *kubeEnv) addPoolNodes(pool string, n int, cpu string) {
	e.t.Helper()
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	for i := range n {
		name := fmt.Sprintf("%s-%d", pool, i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": name, "elastic-test": pool}},
			Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.240.%d.0/24", i),
				Taints: []corev1.Taint{{Key: "elastic-test", Value: pool, Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Allocatable: capacity, Capacity: capacity},
		}
		_, err := e.c.Client.CoreV1().Nodes().Create(e.t.Context(), node, metav1.CreateOptions{})
		require.NoError(e.t, err)
		e.t.Cleanup(func() { _ = e.c.Client.CoreV1().Nodes().Delete(e.t.Context(), name, metav1.DeleteOptions{}) })
	}
}

// webPriorityClass creates the pool's PriorityClass for web pods, above
// the jobs', and deletes it when the test ends.
func (e *kubeEnv) webPriorityClass(pool string) *schedulingv1.PriorityClass {
	e.t.Helper()
	high := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: pool + "-web"}, Value: 1000}
	_, err := e.c.Client.SchedulingV1().PriorityClasses().Create(e.t.Context(), high, metav1.CreateOptions{})
	require.NoError(e.t, err)
	e.t.Cleanup(func() {
		_ = e.c.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), high.Name, metav1.DeleteOptions{})
	})
	return high
}

// webDeployment creates the web Deployment: replicas pods of 3 CPU at the
// priority class, on the pool's nodes.
func (e *kubeEnv) webDeployment(pool, priorityClass string, replicas int32) *appsv1.Deployment {
	e.t.Helper()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: e.ns},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				PriorityClassName: priorityClass,
				NodeSelector:      map[string]string{"elastic-test": pool},
				Tolerations:       []corev1.Toleration{{Key: "elastic-test", Operator: corev1.TolerationOpEqual, Value: pool, Effect: corev1.TaintEffectNoSchedule}},
				Containers: []corev1.Container{{Name: "nginx", Image: "nginx",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("3Gi")}}}},
			}}},
	}
	d, err := e.c.Client.AppsV1().Deployments(e.ns).Create(e.t.Context(), d, metav1.CreateOptions{})
	require.NoError(e.t, err)
	return d
}

// scaleDeployment patches the scale subresource, as `kubectl scale` does: a
// read and an update would conflict with the controller's status writes.
func (e *kubeEnv) scaleDeployment(d *appsv1.Deployment, replicas int32) {
	e.t.Helper()
	_, err := e.c.Client.AppsV1().Deployments(e.ns).Patch(e.t.Context(), d.Name, types.MergePatchType,
		fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas), metav1.PatchOptions{}, "scale")
	require.NoError(e.t, err)
}

// workerReplicas is an ElasticJob's spec.worker.replicas.
func (e *kubeEnv) workerReplicas(name string) (int, bool) {
	u, err := e.dyn.Resource(jobv1.GroupVersionResource).Namespace(e.ns).Get(e.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		return 0, false
	}
	r, found, err := unstructured.NestedInt64(u.Object, "spec", "worker", "replicas")
	return int(r), found && err == nil
}

// waitWorkers waits until the jobs' workers in all satisfy ok, with every
// job Running at its replicas: each trainer of the new size started.
func (e *kubeEnv) waitWorkers(jobs []string, what string, ok func(total int) bool) {
	e.t.Helper()
	var last []string
	require.Eventually(e.t, func() bool {
		total, settled := 0, true
		last = last[:0]
		for _, name := range jobs {
			r, found := e.workerReplicas(name)
			if !found {
				return false
			}
			total += r
			st, err := e.client.Status(e.t.Context(), name)
			last = append(last, fmt.Sprintf("%s: replicas %d, %s world size %d ready %d", name, r, st.Phase, st.WorldSize, st.Ready))
			settled = settled && err == nil && st.WorldSize == r && st.Ready == r && string(st.Phase) == "Running"
		}
		return settled && ok(total)
	}, 180*time.Second, 50*time.Millisecond, "%s; last %v\n%s", what, lazy(func() string { return fmt.Sprint(last) }), e.bridge.out)
}

// lazy is a message argument read when the message is printed, not when
// the assertion is called.
type lazy func() string

func (l lazy) String() string { return l() }

// TestAScaleDownFreesWholeWorkersWithDeletionCosts: web pods (3 CPU) fill
// four 12-CPU nodes, four a node, and an elastic job of 4-CPU workers
// waits for room. Left to itself, the web ReplicaSet sheds four pods from
// four nodes when it scales to 12 (it takes them from the nodes holding
// most), and the 3-CPU holes fit no worker. With --autoscale-deletion-cost
// the autoscaler has given the pods costs that make it empty one node: the
// job grows to three workers there. A cost someone else set over the
// autoscaler's is left alone.
func TestAScaleDownFreesWholeWorkersWithDeletionCosts(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, autoscale: true, deletionCost: true,
		bridgeArgs: []string{"--autoscale-cooldown", "2s", "--autoscale-period", "5s"},
		toyEnv:     []string{"TOY_STEPS=1000000", "TOY_INTERVAL=0.2"}})
	applyCRDs(t, e.c, e.dyn)
	pool := e.ns
	e.addPoolNodes(pool, 4, "12")
	high := e.webPriorityClass(pool)
	web := e.webDeployment(pool, high.Name, 16)
	require.Eventually(t, func() bool { return kubetest.RunningPods(t.Context(), e.c.Client, e.ns, "app=web") == 16 },
		120*time.Second, 50*time.Millisecond, "the web pods never all ran")
	webPods := func() []corev1.Pod {
		list, err := e.c.Client.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app=web"})
		require.NoError(t, err)
		var out []corev1.Pod
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
		return out
	}
	perNode := func(pods []corev1.Pod) map[string]int {
		out := map[string]int{}
		for _, p := range pods {
			out[p.Spec.NodeName]++
		}
		return out
	}
	require.Equal(t, map[string]int{pool + "-0": 4, pool + "-1": 4, pool + "-2": 4, pool + "-3": 4}, perNode(webPods()), "the scheduler fills every node")

	require.NoError(t, e.createJob(autoscaledJobYAML("a", pool)))
	cost := func(p corev1.Pod) int {
		c, err := strconv.Atoi(p.Annotations["controller.kubernetes.io/pod-deletion-cost"])
		require.NoError(t, err, "pod %s", p.Name)
		return c
	}
	require.Eventually(t, func() bool {
		for _, p := range webPods() {
			if p.Annotations["elastic.autoscaler/deletion-cost"] == "" {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "the web pods never got their deletion costs:\n%s", e.bridge.out)

	// Someone else's cost, above any the autoscaler sets, on a pod of the
	// node whose pods go last anyway: it stays.
	var theirs corev1.Pod
	for _, p := range webPods() {
		if theirs.Name == "" || cost(p) > cost(theirs) {
			theirs = p
		}
	}
	_, err := e.c.Client.CoreV1().Pods(e.ns).Patch(t.Context(), theirs.Name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"2000000000"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)

	e.scaleDeployment(web, 12)
	require.Eventually(t, func() bool { return len(webPods()) == 12 }, 60*time.Second, 50*time.Millisecond)
	counts := perNode(webPods())
	assert.Len(t, counts, 3, "the four pods shed are one node's: %v", counts)
	e.waitWorkers([]string{"a"}, "the job grows into the emptied node", func(total int) bool { return total == 3 })

	p, err := e.c.Client.CoreV1().Pods(e.ns).Get(t.Context(), theirs.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "2000000000", p.Annotations["controller.kubernetes.io/pod-deletion-cost"], "someone else's cost is left alone")
}
