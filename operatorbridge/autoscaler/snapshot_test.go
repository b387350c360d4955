package autoscaler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/autoscale"
	"github.com/elastictraining/coordinator/membership"
)

func node(name, cpu string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": name[:1]}},
		Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Gi")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		}}
}

func pod(name, job, role, nodeName string, phase corev1.PodPhase, cpu string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
		Status: corev1.PodStatus{Phase: phase}}
	if job != "" {
		p.Labels[jobv1.LabelJob], p.Labels[jobv1.LabelRole] = job, role
	}
	return p
}

func TestTheViewCountsWhatIsPlacedAndWhatWaits(t *testing.T) {
	cordoned := node("c-0", "16")
	cordoned.Spec.Unschedulable = true
	nodes := []*corev1.Node{node("a-0", "16"), node("a-1", "16"), cordoned,
		node("g-0", "16", corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoSchedule})}
	terminating := pod("train-worker-2", "train", "worker", "a-1", corev1.PodRunning, "5")
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(30 * time.Second)}
	nominated := pod("web-2", "", "", "", corev1.PodPending, "3")
	nominated.Status.NominatedNodeName = "a-1"
	withInit := pod("web-3", "", "", "", corev1.PodPending, "1")
	withInit.Spec.InitContainers = []corev1.Container{{Name: "i",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}}
	pods := []*corev1.Pod{
		pod("train-worker-0", "train", "worker", "a-0", corev1.PodRunning, "5"),
		pod("train-worker-1", "train", "worker", "a-0", corev1.PodPending, "5"), // bound, starting
		terminating,
		pod("train-worker-3", "train", "worker", "", corev1.PodPending, "5"), // the job's own demand
		pod("train-ps-0", "train", "ps", "", corev1.PodPending, "4"),
		pod("web-0", "", "", "a-1", corev1.PodRunning, "3"),
		pod("web-1", "", "", "a-1", corev1.PodSucceeded, "3"),
		nominated, withInit,
	}
	spec := membership.DefaultSpec(membership.NP{Min: 1, Max: 8})
	spec.Target = 4
	candidates := map[string]candidate{"train": {id: "train", spec: spec, created: 7}}
	v := buildView(nodes, pods, candidates, (*controllers)(nil).roomKeeper(pods, candidates, time.Now()))

	require.Len(t, v.snapshot.Nodes, 3, "the cordoned node takes no pods")
	used := map[string]int64{}
	for _, n := range v.snapshot.Nodes {
		used[n.Name] = n.Used.MilliCPU
	}
	assert.Equal(t, map[string]int64{"a-0": 10000, "a-1": 11000, "g-0": 0}, used,
		"bound pods, nominated ones and a worker below the target being replaced hold their room; finished ones do not")
	require.Len(t, v.snapshot.Jobs, 1)
	j := v.snapshot.Jobs[0]
	assert.Equal(t, []autoscale.Worker{{Node: "a-0", Ordinal: 0}, {Node: "a-0", Ordinal: 1}}, j.Placed)
	assert.Equal(t, 4, j.Target)
	assert.Equal(t, int64(5000), j.Worker.MilliCPU)
	assert.Equal(t, map[string]bool{"a-0": true, "a-1": true}, j.Eligible, "the tainted node is not the job's")

	var pending []string
	for _, p := range v.snapshot.Pending {
		pending = append(pending, p.Name+"/"+p.Job)
		if p.Name == "ns/web-3" {
			assert.Equal(t, int64(2000), p.Request.MilliCPU, "an init container's larger request counts")
		}
	}
	assert.ElementsMatch(t, []string{"ns/train-ps-0/train", "ns/web-3/"}, pending)
	assert.InDelta(t, (5.0+5+3)/48, v.utilization, 1e-9, "CPU requests of Running pods over allocatable")
}

func TestSparesAreNeitherRunningNorPendingWorkers(t *testing.T) {
	nodes := []*corev1.Node{node("a-0", "16")}
	pods := []*corev1.Pod{
		pod("train-worker-0", "train", "worker", "a-0", corev1.PodRunning, "4"),
		pod("train-worker-1", "train", "worker", "a-0", corev1.PodRunning, "4"),
		pod("train-worker-2", "train", "worker", "a-0", corev1.PodRunning, "4"), // the spare, placed
		pod("train-worker-3", "train", "worker", "", corev1.PodPending, "4"),    // a second spare, waiting
	}
	spec := membership.DefaultSpec(membership.NP{Min: 1, Max: 4})
	spec.Target, spec.Spares = 2, 2
	candidates := map[string]candidate{"train": {id: "train", spec: spec, created: 7}}
	v := buildView(nodes, pods, candidates, (*controllers)(nil).roomKeeper(pods, candidates, time.Now()))

	require.Len(t, v.snapshot.Jobs, 1)
	assert.Equal(t, []autoscale.Worker{{Node: "a-0", Ordinal: 0}, {Node: "a-0", Ordinal: 1}}, v.snapshot.Jobs[0].Placed,
		"the spares are not running workers")
	assert.Equal(t, int64(12000), v.snapshot.Nodes[0].Used.MilliCPU, "a placed spare takes its room")
	assert.Empty(t, v.snapshot.Pending, "a waiting spare is no demand")
}
