package autoscaler

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

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/autoscale"
	"github.com/elastictraining/coordinator/membership"
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
		template("", map[string]string{jobv1.LabelJob: "train"})}
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

	missing := workload{"replicaset", metav1.ObjectMeta{Name: "typo", Namespace: "ns", UID: "typo"}, 2, template("hgih", nil)}
	raised["typo"] = now
	c := &controllers{list: []workload{web, batch, stale, job, missing}, classes: classes, classesKnown: true, raised: raised}
	got, lapses := c.expected(existing, now)
	assert.Equal(t, now.Add(-time.Second+expectFor), lapses, "the first window to close is web's")
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
		assert.Empty(t, p.Spec.NodeName)
	}
	// web has two of four (one going does not count), batch one of two;
	// stale asked too long ago, train is an elastic job's own, typo's
	// pods would be refused (no such class).
	assert.Equal(t, []string{"replicaset/web (to be created, 1)", "replicaset/web (to be created, 2)", "statefulset/batch (to be created, 1)"}, names)
	require.Len(t, got, 3)
	assert.Equal(t, int32(1000), *got[0].Spec.Priority, "its class's value")
	assert.Equal(t, int32(10), *got[2].Spec.Priority, "the default class's value")
	assert.Equal(t, int64(3000), podRequest(got[0]).MilliCPU)
}

func TestPriorityIsResolvedAsAdmissionDoes(t *testing.T) {
	spec := func(class string) *corev1.PodSpec { return &corev1.PodSpec{PriorityClassName: class} }
	two := &controllers{classesKnown: true, classes: []*schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Value: 1000, GlobalDefault: true},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Value: 10, GlobalDefault: true},
	}}
	got, ok := two.priorityOf(spec(""), nil)
	assert.True(t, ok)
	assert.Equal(t, int32(10), got, "two default classes: the lowest")
	_, ok = two.priorityOf(spec("none"), nil)
	assert.False(t, ok, "no such class: its pods will never exist")

	blind := &controllers{} // PriorityClasses may not be listed
	got, ok = blind.priorityOf(spec("high"), ptr(int32(500)))
	assert.True(t, ok)
	assert.Equal(t, int32(500), got, "an existing pod's of the workload")
	got, _ = blind.priorityOf(spec("high"), nil)
	assert.Zero(t, got)
}

func TestAWorkloadSeenInTheFirstListIsNotExpectedToGrow(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	blocked := workload{"statefulset", metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "db"}, 3,
		corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}}
	// A leader's informers list it at the start of a term: it is noted at
	// its creation, a day ago, so that a shortfall that has lasted (a
	// quota, a pod that never gets Ready) is not taken for new demand.
	c := &controllers{list: []workload{blocked}, classesKnown: true, raised: map[types.UID]time.Time{"db": now.Add(-24 * time.Hour)}}
	got, lapses := c.expected(nil, now)
	assert.Empty(t, got)
	assert.True(t, lapses.IsZero())
}

// A pod being deleted keeps its room while its controller will replace it
// (a StatefulSet recreates a pod once the old one is gone), or while it is
// stuck; a scale-down's, a bare pod's and a shrunk job's worker's room is
// free.
func TestWhoseRoomAPodBeingDeletedFrees(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	deleting := func(p *corev1.Pod, at time.Time) *corev1.Pod {
		p.DeletionTimestamp = &metav1.Time{Time: at}
		return p
	}
	owned := func(p *corev1.Pod, uid types.UID) *corev1.Pod {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{UID: uid, Controller: &yes}}
		return p
	}
	db := workload{"statefulset", metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "db"}, 1, corev1.PodTemplateSpec{}}
	web := workload{"replicaset", metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "web"}, 1, corev1.PodTemplateSpec{}}
	replaced := owned(deleting(pod("db-0", "", "", "a-0", corev1.PodRunning, "10"), now.Add(20*time.Second)), "db")
	surplus := owned(deleting(pod("web-b", "", "", "a-0", corev1.PodRunning, "3"), now.Add(20*time.Second)), "web")
	kept := owned(pod("web-a", "", "", "a-0", corev1.PodRunning, "3"), "web")
	bare := deleting(pod("lone", "", "", "a-0", corev1.PodRunning, "1"), now.Add(20*time.Second))
	stuck := deleting(pod("old", "", "", "a-0", corev1.PodRunning, "1"), now.Add(-time.Hour))
	shrunk := deleting(pod("train-worker-3", "train", "worker", "a-0", corev1.PodRunning, "5"), now.Add(20*time.Second))
	restarting := deleting(pod("train-worker-1", "train", "worker", "a-0", corev1.PodRunning, "5"), now.Add(20*time.Second))
	daemon := deleting(owned(pod("agent-x", "", "", "a-0", corev1.PodRunning, "1"), "daemonset"), now.Add(20*time.Second))
	pods := []*corev1.Pod{replaced, surplus, kept, bare, stuck, shrunk, restarting, daemon}

	c := &controllers{list: []workload{db, web}}
	holds := c.roomKeeper(pods, trainCandidate(2), now)
	for _, tc := range []struct {
		pod   *corev1.Pod
		holds bool
	}{{replaced, true}, {surplus, false}, {bare, false}, {stuck, true}, {shrunk, false}, {restarting, true}, {daemon, true}, {kept, true}} {
		assert.Equal(t, tc.holds, holds(tc.pod), tc.pod.Name)
	}
	// Without the controllers, only what is known to go frees its room.
	var none *controllers
	holds = none.roomKeeper(pods, trainCandidate(2), now)
	assert.True(t, holds(surplus))
	assert.False(t, holds(shrunk))
}

// The room of a higher-priority StatefulSet pod being replaced is not
// grown into (the job would shrink again, urgently, when the pod came back:
// two restarts, and the pod waiting for the trainers to go).
func TestTheRoomOfAPodBeingReplacedIsNotGrownInto(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := []*corev1.Node{node("a-0", "16"), node("a-1", "16")}
	db := workload{"statefulset", metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "db"}, 1, corev1.PodTemplateSpec{}}
	old := pod("db-0", "", "", "a-1", corev1.PodRunning, "10")
	yes := true
	old.OwnerReferences = []metav1.OwnerReference{{UID: "db", Controller: &yes}}
	old.Spec.Priority = ptr(int32(1000))
	old.DeletionTimestamp = &metav1.Time{Time: now.Add(30 * time.Second)}
	pods := []*corev1.Pod{
		pod("train-worker-0", "train", "worker", "a-0", corev1.PodRunning, "5"),
		pod("train-worker-1", "train", "worker", "a-0", corev1.PodRunning, "5"),
		old,
	}
	c := &controllers{list: []workload{db}, classesKnown: true}
	v := buildView(nodes, pods, trainCandidate(2), c.roomKeeper(pods, trainCandidate(2), now))
	for i := range v.snapshot.Jobs {
		v.snapshot.Jobs[i].Changed = now.Add(-time.Hour)
	}
	p, err := autoscale.New(autoscale.Config{})
	require.NoError(t, err)
	plan := p.Decide(v.snapshot, now)
	// a-0 has room for one more (16 - 10), a-1 for one beside db-0 (16 -
	// 10): 2 → 4, not the 5 that db-0's room would add.
	assert.Equal(t, 4, plan.Desired["train"])
}

func trainCandidate(target int) map[string]candidate {
	spec := membership.DefaultSpec(membership.NP{Min: 1, Max: 8})
	spec.Target = target
	return map[string]candidate{"train": {id: "train", spec: spec, created: 1}}
}

func ptr[T any](v T) *T { return &v }
