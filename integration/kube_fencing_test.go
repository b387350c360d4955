package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge"
)

// TestConfigMapWriteIsRetriedUntilItSucceeds denies the bridge the job's
// ConfigMap while the first generation commits, then allows it again: the
// ConfigMap appears for that generation, with no later generation to
// prompt it.
func TestConfigMapWriteIsRetriedUntilItSucceeds(t *testing.T) {
	t.Parallel()
	// The configmaps rule, narrowed to a name the job's ConfigMap does not have.
	denied := strings.Replace(rbacRules(t), `resources: ["configmaps"]`, `resources: ["configmaps"]`+"\n    resourceNames: [\"none\"]", 1)
	e := newKubeEnv(t, kubeOptions{role: denied, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=1"}})
	e.spec("retry", membership.DefaultSpec(membership.NP{Min: 2, Max: 2}))
	e.statefulSet("retry", "worker", 2, nil)
	st := e.status("retry", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	require.Eventually(t, func() bool {
		return strings.Contains(e.bridge.out.String(), `configmaps \"retry-elastic\" is forbidden`)
	}, 30*time.Second, 20*time.Millisecond, "the bridge never tried to write the ConfigMap:\n%s", e.bridge.out)

	e.setRole("")
	require.Eventually(t, func() bool {
		cm, err := e.c.Client.CoreV1().ConfigMaps(e.ns).Get(t.Context(), operatorbridge.ConfigMapName("retry"), metav1.GetOptions{})
		return err == nil && cm.Annotations[jobv1.AnnotationGeneration] == itoa64(st.Generation)
	}, 60*time.Second, 20*time.Millisecond, "the ConfigMap of generation %d was never written once RBAC allowed it:\n%s", st.Generation, e.bridge.out)
	now, err := e.client.Status(t.Context(), "retry")
	require.NoError(t, err)
	assert.Equal(t, st.Generation, now.Generation, "no later generation prompted the write")
	e.bridgeStatus("retry", func(b membership.BridgeStatus) bool { return b.Problem == "" })
}

// TestConfigMapOfANewerGenerationIsKept puts in place the ConfigMap of a
// generation the bridge has not seen, as the bridge of a newer leader
// writes it while a deposed one still runs on an older view, and commits
// the job's first generation: the bridge leaves the newer ConfigMap alone.
func TestConfigMapOfANewerGenerationIsKept(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=1"}})
	newer := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: operatorbridge.ConfigMapName("kept"), Labels: map[string]string{"elastic.job": "kept"},
			Annotations: map[string]string{jobv1.AnnotationGeneration: "100"}},
		Data: map[string]string{"ELASTIC_GENERATION": "100", "WORLD_SIZE": "8"},
	}
	_, err := e.c.Client.CoreV1().ConfigMaps(e.ns).Create(t.Context(), newer, metav1.CreateOptions{})
	require.NoError(t, err)
	e.spec("kept", membership.DefaultSpec(membership.NP{Min: 2, Max: 2}))
	e.statefulSet("kept", "worker", 2, nil)
	st := e.status("kept", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	require.Less(t, st.Generation, int64(100))

	var got *corev1.ConfigMap
	require.Eventually(t, func() bool {
		got, err = e.c.Client.CoreV1().ConfigMaps(e.ns).Get(t.Context(), newer.Name, metav1.GetOptions{})
		require.NoError(t, err)
		return got.Annotations[jobv1.AnnotationGeneration] != "100" ||
			strings.Contains(e.bridge.out.String(), "describes a newer generation")
	}, 30*time.Second, 20*time.Millisecond, "the bridge never dealt with generation %d:\n%s", st.Generation, e.bridge.out)
	assert.Equal(t, "100", got.Annotations[jobv1.AnnotationGeneration], "generation %d replaced a newer ConfigMap", st.Generation)
	assert.Equal(t, newer.Data, got.Data)
}

// TestForceDeletedPodLeavesAnEvictionRecord deletes by force the pod of a
// machine that is cut off (its sidecar frozen, its containers Running as far
// as Kubernetes knows). The bridge evicts the node at once but leaves an
// eviction record that outlives the node's own fence deadline, and the next
// generation runs only a TTL after the lease is gone: until then the cut-off
// trainer may still run.
func TestForceDeletedPodLeavesAnEvictionRecord(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	e := newKubeEnv(t, kubeOptions{sidecarTTL: ttl, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=1"}})
	keys := membership.DefaultKeys()
	e.spec("force", membership.DefaultSpec(membership.NP{Min: 2, Max: 2}))
	e.statefulSet("force", "worker", 2, nil)
	st := e.status("force", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })

	cli := e.etcd.Client(t)
	resp, err := cli.Get(t.Context(), keys.Node("force", "force-worker-1"))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	lease := resp.Kvs[0].Lease
	// Everything from here on, in order: the record's put and delete, the plans.
	watch := cli.Watch(t.Context(), keys.Job("force"), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	freeze(t, e.runner, "force-worker-1")
	zero := int64(0)
	require.NoError(t, e.c.Client.CoreV1().Pods(e.ns).Delete(t.Context(), "force-worker-1", metav1.DeleteOptions{GracePeriodSeconds: &zero}))

	events := &eventStream{t: t, watch: watch}
	recordKey := keys.Eviction("force", "force-worker-1", lease)
	isRun := func(ev *clientv3.Event) bool {
		if string(ev.Kv.Key) != keys.Plan("force") || ev.Type != clientv3.EventTypePut {
			return false
		}
		p, err := membership.DecodePlan(ev.Kv.Value)
		return err == nil && p.Generation > st.Generation && p.Phase == membership.PhaseRun
	}
	put := events.next(ttl, func(ev *clientv3.Event) bool {
		require.False(t, isRun(ev), "a generation ran and the bridge left no eviction record for a pod deleted while its containers ran:\n%s", e.bridge.out)
		return string(ev.Kv.Key) == recordKey
	})
	require.Equal(t, clientv3.EventTypePut, put.Type)
	rec, err := membership.DecodeEviction(put.Kv.Value)
	require.NoError(t, err)
	assert.Equal(t, "bridge", rec.By)
	assert.Equal(t, lease, rec.Lease)
	assert.Equal(t, int64(ttl/time.Second), rec.TTLSeconds)
	// Revoked at once, not left to expire a TTL after the freeze.
	require.Eventually(t, func() bool {
		left, err := cli.TimeToLive(t.Context(), clientv3LeaseID(lease))
		return err == nil && left.TTL == -1
	}, ttl/4, 20*time.Millisecond, "the frozen node's lease was not revoked")
	revoked := time.Now()

	// The frozen node may run until its own deadline, a TTL after its last
	// renewal: the next generation waits for that, on the coordinator's
	// clock from when it saw the lease gone, or for the record to expire.
	events.next(3*ttl, isRun)
	assert.False(t, time.Now().Before(revoked.Add(ttl)), "a generation ran %s after the evicted node's lease was revoked, within its TTL of %s",
		time.Since(revoked), ttl)
}

// TestAGracefulRemovalWaitsForNoLease deletes a pod, then scales the job
// down, each time while the pod's sidecar is alive and its trainer takes a
// second to stop. The bridge evicts the node of a deleted pod when the pod
// object goes, which kwok does at once, before the sidecar has stopped:
// an eviction record, as for a forced delete. The sidecar, once its
// trainer stopped, says so, and the next generation runs without waiting
// out the node's lease (20 s here). TestForceDeletedPodLeavesAnEvictionRecord
// is the other side: a node that cannot say so is waited for.
func TestAGracefulRemovalWaitsForNoLease(t *testing.T) {
	t.Parallel()
	const ttl = 20 * time.Second
	e := newKubeEnv(t, kubeOptions{sidecarTTL: ttl, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=1", "TOY_STOP_SECONDS=1"}})
	keys := membership.DefaultKeys()
	cli := e.etcd.Client(t)
	e.spec("graceful", membership.DefaultSpec(membership.NP{Min: 1, Max: 2}))
	e.statefulSet("graceful", "worker", 2, nil)
	running2 := func() membership.Status {
		return e.status("graceful", "Running with 2", func(s membership.Status) bool { return s.Phase == membership.JobRunning && s.Members == 2 })
	}
	// watch follows the job from now on; nextRun waits for a generation
	// after gen to run, at world size members unless 0.
	watch := func() (*eventStream, int64) {
		resp, err := cli.Get(t.Context(), keys.Node("graceful", "graceful-worker-1"))
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		w := cli.Watch(t.Context(), keys.Job("graceful"), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		return &eventStream{t: t, watch: w}, resp.Kvs[0].Lease
	}
	nextRun := func(events *eventStream, gen int64, members int) membership.Plan {
		var p membership.Plan
		events.next(2*ttl, func(ev *clientv3.Event) bool {
			if string(ev.Kv.Key) != keys.Plan("graceful") || ev.Type != clientv3.EventTypePut {
				return false
			}
			var err error
			p, err = membership.DecodePlan(ev.Kv.Value)
			return err == nil && p.Generation > gen && p.Phase == membership.PhaseRun && (members == 0 || p.WorldSize == members)
		})
		return p
	}

	// kubectl delete pod: the pod is gone before its sidecar stopped.
	st := running2()
	events, lease := watch()
	require.NoError(t, e.c.Client.CoreV1().Pods(e.ns).Delete(t.Context(), "graceful-worker-1", metav1.DeleteOptions{}))
	put := events.next(ttl/2, func(ev *clientv3.Event) bool {
		return string(ev.Kv.Key) == keys.Eviction("graceful", "graceful-worker-1", lease) && ev.Type == clientv3.EventTypePut
	})
	rec, err := membership.DecodeEviction(put.Kv.Value)
	require.NoError(t, err)
	require.Equal(t, "bridge", rec.By, "the bridge evicts the node of a pod gone before its sidecar stopped")
	nextRun(events, st.Generation, 0) // with the pod's replacement, or without
	assert.True(t, time.Now().Before(rec.At.Add(ttl)), "the next generation ran %s after the eviction, having waited out the %s lease of a node that stopped",
		time.Since(rec.At), ttl)
	got, err := cli.Get(t.Context(), keys.Takeover("graceful", "graceful-worker-1", lease))
	require.NoError(t, err)
	assert.Len(t, got.Kvs, 1, "the stopped sidecar did not record its processes dead")

	// A scale-down: the generation without the pod runs first, then the
	// pod goes, restarting nothing.
	st = running2()
	events, _ = watch()
	scaled := time.Now()
	_, err = e.client.Scale(t.Context(), "graceful", membership.FixedNP(1))
	require.NoError(t, err)
	p := nextRun(events, st.Generation, 1)
	assert.True(t, time.Now().Before(scaled.Add(ttl)), "the scale-down ran %s after the scale, a lease's wait", time.Since(scaled))
	require.Eventually(t, func() bool {
		pods, err := e.c.Client.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "elastic.job=graceful"})
		nodes, nerr := e.client.Nodes(t.Context(), "graceful")
		return err == nil && nerr == nil && len(pods.Items) == 1 && len(nodes) == 1
	}, ttl, 20*time.Millisecond, "the pod scaled away never left")
	final := e.status("graceful", "Running with 1", func(s membership.Status) bool { return s.Phase == membership.JobRunning && s.Members == 1 })
	assert.Equal(t, p.Generation, final.Generation, "the pod's going restarted the job")
}

// eventStream hands out a watch's events one at a time, in order.
type eventStream struct {
	t       *testing.T
	watch   clientv3.WatchChan
	pending []*clientv3.Event
}

// next returns the next event that match accepts, skipping the others.
func (s *eventStream) next(timeout time.Duration, match func(*clientv3.Event) bool) *clientv3.Event {
	s.t.Helper()
	deadline := time.After(timeout)
	for {
		for len(s.pending) > 0 {
			ev := s.pending[0]
			s.pending = s.pending[1:]
			if match(ev) {
				return ev
			}
		}
		select {
		case wr, ok := <-s.watch:
			require.True(s.t, ok, "the watch ended")
			require.NoError(s.t, wr.Err())
			s.pending = wr.Events
		case <-deadline:
			s.t.Fatalf("no matching event within %s", timeout)
		}
	}
}

// TestStatefulSetScaleDownRestartsOnce runs a job on a StatefulSet that
// starts its pods in parallel (they join in any order): the first
// generation ranks them by ordinal, pod 0 rank 0. Scaled 4 → 2, it restarts
// once: the table keeps the pods the StatefulSet keeps, ordinals 0 and 1.
// (A table whose highest ordinals hold the lowest ranks, as later
// generations can have, is coordinator/ranks_test's.)
func TestStatefulSetScaleDownRestartsOnce(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=1"}})
	sts := e.statefulSet("shrink", "worker", 4, nil)
	pod := func(i int) string { return sts.Name + "-" + itoa(i) }

	e.registered("shrink", 4)
	e.spec("shrink", membership.DefaultSpec(membership.NP{Min: 4, Max: 4}))
	st := e.status("shrink", "Running with 4", func(s membership.Status) bool { return s.Phase == membership.JobRunning && s.Members == 4 })
	resp, err := e.etcd.Client(t).Get(t.Context(), membership.DefaultKeys().Plan("shrink"))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	plan, err := membership.DecodePlan(resp.Kvs[0].Value)
	require.NoError(t, err)
	require.NoError(t, membership.ResolvePlan(t.Context(), e.etcd.Client(t), membership.DefaultKeys(), "shrink", &plan, resp.Kvs[0].ModRevision, nil))
	require.Equal(t, st.Generation, plan.Generation)
	for _, m := range plan.Members {
		assert.Equal(t, pod(m.Rank), m.Node, "a first generation ranks a StatefulSet's pods by ordinal")
	}

	watch := e.etcd.Client(t).Watch(t.Context(), membership.DefaultKeys().Plan("shrink"), clientv3.WithRev(resp.Header.Revision+1))
	code, _, stderr := cli(t, nil, "scale", "--etcd-endpoints", e.etcd.Endpoint(), "--job", "shrink", "--np", "2")
	require.Equal(t, 0, code, stderr)
	events := &eventStream{t: t, watch: watch}
	var runs []membership.Plan
	for len(runs) == 0 {
		ev := events.next(60*time.Second, func(ev *clientv3.Event) bool { return ev.Type == clientv3.EventTypePut })
		p, err := membership.DecodePlan(ev.Kv.Value)
		require.NoError(t, err)
		if p.Phase == membership.PhaseRun {
			// The plan names its table, stored with it.
			require.NoError(t, membership.ResolvePlan(t.Context(), e.etcd.Client(t), membership.DefaultKeys(), "shrink", &p, ev.Kv.ModRevision, nil))
			runs = append(runs, p)
		}
	}
	next := runs[0]
	assert.Equal(t, st.Generation+1, next.Generation, "one generation after the scale")
	var kept []string
	for _, m := range next.Members {
		kept = append(kept, m.Node)
	}
	assert.ElementsMatch(t, []string{pod(0), pod(1)}, kept, "the table keeps the pods the StatefulSet keeps")

	// The StatefulSet removes ordinals 2 and 3; nothing else restarts.
	require.Eventually(t, func() bool {
		pods, err := e.c.Client.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "elastic.job=shrink"})
		nodes, nerr := e.client.Nodes(t.Context(), "shrink")
		return err == nil && nerr == nil && len(pods.Items) == 2 && len(nodes) == 2
	}, 60*time.Second, 20*time.Millisecond, "ordinals 2 and 3 never left")
	final := e.status("shrink", "Running with 2", func(s membership.Status) bool { return s.Phase == membership.JobRunning && s.Members == 2 })
	assert.Equal(t, next.Generation, final.Generation, "a single restart")
}

// registered waits for n nodes of a job to register and returns them by id.
func (e *kubeEnv) registered(job string, n int) map[string]membership.LiveNode {
	e.t.Helper()
	var nodes []membership.LiveNode
	require.Eventually(e.t, func() bool {
		var err error
		nodes, err = e.client.Nodes(e.t.Context(), job)
		return err == nil && len(nodes) == n
	}, 60*time.Second, 20*time.Millisecond, "%d nodes of %s never registered", n, job)
	byID := map[string]membership.LiveNode{}
	for _, node := range nodes {
		byID[node.ID] = node
	}
	return byID
}
