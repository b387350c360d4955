package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge"
)

func TestDeployManifestsApplyServerSide(t *testing.T) {
	c := kubeCluster(t)
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	kubectl := func(args ...string) string {
		t.Helper()
		out, errOut, err := c.Kubectl(t.Context(), repoRoot, "", args...)
		require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), errOut)
		return out
	}
	// As docs/kubernetes.md and the README have it, in their order on a
	// cluster that has nothing yet: the certificates' Secrets, the deploy,
	// the optional CRDs, the samples.
	certs := t.TempDir()
	code, _, stderr := cli(t, nil, "certs", "--out", certs)
	require.Equal(t, 0, code, stderr)
	kubectl("apply", "-f", filepath.Join(certs, "secrets.yaml"))
	kubectl("apply", "--server-side", "-k", "deploy/")
	kubectl("apply", "--server-side", "-f", "deploy/crds/")
	kubectl("wait", "--for", "condition=established", "--timeout=60s",
		"crd/elasticjobs.elastictraining.io", "crd/paddlejobs.batch.paddlepaddle.org", "crd/msjobs.mindspore.gitee.com")
	kubectl("apply", "--server-side", "-f", "deploy/samples/")
	// The opt-in overlays render and the API server takes them.
	for overlay, flag := range map[string]string{"deploy/autoscaler/": "--autoscale", "deploy/all-namespaces/": "--all-namespaces",
		"deploy/autoscaler-deletion-cost/": "--autoscale-deletion-cost", "deploy/kueue/": "--kueue"} {
		assert.Contains(t, kubectl("kustomize", overlay), "- "+flag, overlay)
		kubectl("apply", "--server-side", "--dry-run=server", "-k", overlay)
	}
	version := strings.TrimSpace(mustRead(t, filepath.Join(repoRoot, "VERSION")))
	deploy, err := c.Client.AppsV1().Deployments("elastic-system").Get(t.Context(), "elastic-coordinator", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "elastic-coordinator:"+version, deploy.Spec.Template.Spec.Containers[0].Image, "the versioned image of kustomization.yaml")
	assert.Equal(t, int32(2), *deploy.Spec.Replicas, "two replicas for leader election")
	probe := deploy.Spec.Template.Spec.Containers[0].LivenessProbe
	require.NotNil(t, probe)
	assert.Equal(t, "/healthz", probe.HTTPGet.Path)
	_, err = c.Client.AppsV1().StatefulSets("elastic-system").Get(t.Context(), "elastic-etcd", metav1.GetOptions{})
	assert.NoError(t, err)
	for _, gvr := range []schema.GroupVersionResource{jobv1.GroupVersionResource, paddleJobs} {
		list, err := dyn.Resource(gvr).Namespace("elastic-system").List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		assert.Len(t, list.Items, 1, "the sample %s", gvr.Resource)
	}
	for _, name := range []string{"elastic-etcd", "elastic-coordinator"} {
		_, err := c.Client.NetworkingV1().NetworkPolicies("elastic-system").Get(t.Context(), name, metav1.GetOptions{})
		assert.NoError(t, err, "NetworkPolicy %s", name)
	}
	etcd, err := c.Client.AppsV1().StatefulSets("elastic-system").Get(t.Context(), "elastic-etcd", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(3), *etcd.Spec.Replicas, "three etcd members survive the loss of one")
	args := strings.Join(etcd.Spec.Template.Spec.Containers[0].Args, " ")
	assert.Contains(t, args, "elastic-etcd-0=https://elastic-etcd-0.elastic-etcd:2380,elastic-etcd-1=https://elastic-etcd-1.elastic-etcd:2380,elastic-etcd-2=")
	for _, flag := range []string{"--client-cert-auth", "--peer-client-cert-auth", "--listen-client-urls=https://"} {
		assert.Contains(t, args, flag, "etcd speaks mutual TLS only")
	}
	assert.Equal(t, "/readyz", etcd.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path)
	coordinatorArgs := strings.Join(deploy.Spec.Template.Spec.Containers[0].Args, " ")
	for _, flag := range []string{"--cert=", "--etcd-endpoints=https://", "--etcd-enable-auth", "--sidecar-etcd-auth", "--sidecar-etcd-secret=elastic-sidecar-etcd"} {
		assert.Contains(t, coordinatorArgs, flag)
	}
}

func mustRead(t *testing.T, file string) string {
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	return string(data)
}

// TestBridgeFollowsScaleWithPodsConfigMapAndServices scales a job 2 → 4 → 3
// and checks, at each size, the StatefulSet, the Running pods, the job's
// world size, the ConfigMap's endpoints and the per-pod Services. The bridge
// runs on its ServiceAccount's token, with deploy/rbac.yaml's Role only.
func TestBridgeFollowsScaleWithPodsConfigMapAndServices(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=1"}})
	e.spec("train", membership.DefaultSpec(membership.NP{Min: 2, Max: 2}))
	sts := e.statefulSet("train", "worker", 2, map[string]string{"elastic.intranet": "Service"})

	gen := int64(0)
	for _, n := range []int{2, 4, 3} {
		code, _, stderr := cli(t, nil, "scale", "--etcd-endpoints", e.etcd.Endpoint(), "--job", "train", "--np", itoa(n))
		require.Equal(t, 0, code, stderr)

		require.Eventually(t, func() bool {
			got, err := e.c.Client.AppsV1().StatefulSets(e.ns).Get(t.Context(), sts.Name, metav1.GetOptions{})
			return err == nil && *got.Spec.Replicas == int32(n)
		}, 30*time.Second, 20*time.Millisecond, "the StatefulSet never had %d replicas:\n%s", n, e.bridge.out)
		require.Eventually(t, func() bool { return kubetest.RunningPods(t.Context(), e.c.Client, e.ns, "elastic.job=train") == n }, 60*time.Second, 50*time.Millisecond)
		st := e.status("train", "Running at "+itoa(n), func(s membership.Status) bool {
			return s.Phase == membership.JobRunning && s.WorldSize == n && s.Generation > gen
		})
		gen = st.Generation

		var cm *corev1.ConfigMap
		require.Eventually(t, func() bool {
			got, err := e.c.Client.CoreV1().ConfigMaps(e.ns).Get(t.Context(), operatorbridge.ConfigMapName("train"), metav1.GetOptions{})
			cm = got
			return err == nil && got.Annotations[jobv1.AnnotationGeneration] == itoa64(gen)
		}, 30*time.Second, 20*time.Millisecond, "the ConfigMap never described generation %d", gen)
		endpoints := strings.Split(cm.Data["PADDLE_TRAINER_ENDPOINTS"], ",")
		assert.Len(t, endpoints, n)
		for _, ep := range endpoints {
			assert.Regexp(t, `^train-worker-\d\.`+e.ns+`\.svc:36000$`, ep, "sidecars advertise their pod's Service")
		}
		assert.Equal(t, itoa(n), cm.Data["PADDLE_TRAINERS_NUM"])
		assert.Equal(t, itoa(n), cm.Data["MS_WORKER_NUM"])
		assert.Equal(t, sts.UID, cm.OwnerReferences[0].UID, "the ConfigMap goes with the workload")

		require.Eventually(t, func() bool {
			svcs, err := e.c.Client.CoreV1().Services(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "elastic.job=train"})
			if err != nil || len(svcs.Items) != n {
				return false
			}
			for _, s := range svcs.Items {
				if s.Spec.ClusterIP != corev1.ClusterIPNone || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Pod" {
					return false
				}
			}
			return true
		}, 30*time.Second, 20*time.Millisecond, "one headless Service per pod, owned by it")
		assert.Eventually(t, func() bool {
			return hasEvent(e.events(sts.Name), "Generation", "generation "+itoa64(gen)+":")
		}, 10*time.Second, 20*time.Millisecond, "an Event on the workload for generation %d", gen)
	}

	// What the bridge created goes with the workload.
	require.NoError(t, e.c.Client.AppsV1().StatefulSets(e.ns).Delete(t.Context(), sts.Name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, cmErr := e.c.Client.CoreV1().ConfigMaps(e.ns).Get(t.Context(), operatorbridge.ConfigMapName("train"), metav1.GetOptions{})
		svcs, err := e.c.Client.CoreV1().Services(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "elastic.job=train"})
		return apierrors.IsNotFound(cmErr) && err == nil && len(svcs.Items) == 0
	}, 60*time.Second, 50*time.Millisecond, "the ConfigMap and Services outlived the workload")
}

// TestGonePodEvictsItsNodeAtOnce ends a pod whose containers Kubernetes
// reports stopped — deleted once they terminated, or failed — and expects
// the coordinator to move on long before the node's 60 s lease could
// expire, with no eviction record to wait for. The sidecar is killed, so
// that it neither renews nor revokes its lease.
func TestGonePodEvictsItsNodeAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name, why string
		end       func(e *kubeEnv, pod string)
	}{
		{"deleted", "its pod was deleted", func(e *kubeEnv, pod string) {
			e.reportTerminated(pod)
			zero := int64(0)
			require.NoError(e.t, e.c.Client.CoreV1().Pods(e.ns).Delete(e.t.Context(), pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
		}},
		{"failed", "its pod failed", func(e *kubeEnv, pod string) {
			p, err := e.c.Client.CoreV1().Pods(e.ns).Get(e.t.Context(), pod, metav1.GetOptions{})
			require.NoError(e.t, err)
			p.Status.Phase = corev1.PodFailed
			_, err = e.c.Client.CoreV1().Pods(e.ns).UpdateStatus(e.t.Context(), p, metav1.UpdateOptions{})
			require.NoError(e.t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newKubeEnv(t, kubeOptions{sidecarTTL: 60 * time.Second, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=1"}})
			e.spec("evict", membership.DefaultSpec(membership.NP{Min: 2, Max: 2}))
			e.statefulSet("evict", "worker", 2, nil)
			st := e.status("evict", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })

			resp, err := e.etcd.Client(t).Get(t.Context(), membership.DefaultKeys().Node("evict", "evict-worker-1"))
			require.NoError(t, err)
			require.Len(t, resp.Kvs, 1)
			lease := resp.Kvs[0].Lease
			e.killContainer("evict-worker-1")
			tc.end(e, "evict-worker-1")

			start := time.Now()
			e.status("evict", "past the lost member", func(s membership.Status) bool { return s.Generation > st.Generation })
			t.Logf("the coordinator saw the node go %s after its pod was %s", time.Since(start).Round(time.Millisecond), tc.name)
			ttl, err := e.etcd.Client(t).TimeToLive(t.Context(), clientv3LeaseID(lease))
			require.NoError(t, err)
			assert.Equal(t, int64(-1), ttl.TTL, "the bridge revoked the killed node's lease")
			assert.Contains(t, e.bridge.out.String(), tc.why)
			rec, err := e.etcd.Client(t).Get(t.Context(), membership.DefaultKeys().Evictions("evict"), clientv3.WithPrefix())
			require.NoError(t, err)
			assert.Empty(t, rec.Kvs, "no eviction record: Kubernetes said the containers stopped")

			// The StatefulSet brings the pod back; the job runs at full size again.
			e.status("evict", "Running again with 2", func(s membership.Status) bool {
				return s.Phase == membership.JobRunning && s.Members == 2 && s.Generation > st.Generation
			})
		})
	}
}

func TestOnCompletionRemovesThePods(t *testing.T) {
	t.Parallel()
	// serve finds the cluster in ~/.kube/config, as kubectl does.
	e := newKubeEnv(t, kubeOptions{toyEnv: []string{"TOY_STEPS=3", "TOY_INTERVAL=0.2"}, homeKubeconfig: true})
	spec := membership.DefaultSpec(membership.NP{Min: 2, Max: 2})
	spec.CleanPodPolicy = membership.CleanPodOnCompletion
	e.spec("done", spec)
	sts := e.statefulSet("done", "worker", 2, nil)
	e.status("done", "Succeeded", func(s membership.Status) bool { return s.Phase == membership.JobSucceeded })

	require.Eventually(t, func() bool {
		got, err := e.c.Client.AppsV1().StatefulSets(e.ns).Get(t.Context(), sts.Name, metav1.GetOptions{})
		return err == nil && *got.Spec.Replicas == 0
	}, 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		pods, err := e.c.Client.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "elastic.job=done"})
		return err == nil && len(pods.Items) == 0
	}, 60*time.Second, 50*time.Millisecond, "the pods are gone once the job succeeded")
	assert.True(t, hasEvent(e.events(sts.Name), "Scaled", "cleanPodPolicy OnCompletion"))
}

// TestCustomResourceScalesThroughItsScaleSubresource scales a PaddleJob-like
// resource the way it scales a StatefulSet.
func TestCustomResourceScalesThroughItsScaleSubresource(t *testing.T) {
	t.Parallel()
	c := kubeCluster(t)
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	applyCRDs(t, c, dyn)
	e := newKubeEnv(t, kubeOptions{
		role:       paddleJobRole,
		bridgeArgs: []string{"--workload-resource", "statefulsets.v1.apps", "--workload-resource", "paddlejobs.v1.batch.paddlepaddle.org"},
	})
	e.apply(`
apiVersion: batch.paddlepaddle.org/v1
kind: PaddleJob
metadata:
  name: wide-and-deep
  labels: {elastic.job: wide-and-deep, elastic.role: worker}
spec:
  withGloo: 1
  cleanPodPolicy: OnCompletion
  worker: {replicas: 2}
  ps: {replicas: 2}
`, e.ns)
	e.spec("wide-and-deep", membership.DefaultSpec(membership.NP{Min: 5, Max: 5}))
	paddleJobs := schema.GroupVersionResource{Group: "batch.paddlepaddle.org", Version: "v1", Resource: "paddlejobs"}
	require.Eventually(t, func() bool {
		pj, err := e.dyn.Resource(paddleJobs).Namespace(e.ns).Get(t.Context(), "wide-and-deep", metav1.GetOptions{})
		if err != nil {
			return false
		}
		replicas, _, _ := unstructuredInt(pj.Object, "spec", "worker", "replicas")
		return replicas == 5
	}, 30*time.Second, 20*time.Millisecond, "the PaddleJob's workers were never set to 5:\n%s", e.bridge.out)
}

// paddleJobRole is deploy/rbac.yaml's Role plus the PaddleJob resource.
const paddleJobRole = `rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["apps"]
    resources: ["statefulsets"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["apps"]
    resources: ["statefulsets/scale"]
    verbs: ["get", "update"]
  - apiGroups: ["batch.paddlepaddle.org"]
    resources: ["paddlejobs"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["batch.paddlepaddle.org"]
    resources: ["paddlejobs/scale"]
    verbs: ["get", "update"]
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["get", "create", "update"]
  - apiGroups: [""]
    resources: ["services"]
    verbs: ["get", "create", "update", "delete"]
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create", "patch"]
`

// TestBridgeProblemsAreReportedAndTheJobGoesOn gives the bridge what it
// cannot work with: a job with no workload, a workload without a scale
// subresource, a Role that denies the scale subresource, and no kubeconfig.
// Each is said in the log, in the job's bridge status (shown by `coordinator
// status`) or an Event, and the etcd side of the job carries on; serve
// without a kubeconfig says so in one line and exits.
func TestBridgeProblemsAreReportedAndTheJobGoesOn(t *testing.T) {
	t.Run("no workload has the job's labels", func(t *testing.T) {
		t.Parallel()
		e := newKubeEnv(t, kubeOptions{})
		e.spec("orphan", membership.DefaultSpec(membership.NP{Min: 1, Max: 1}))
		b := e.bridgeStatus("orphan", func(b membership.BridgeStatus) bool { return b.Problem != "" })
		assert.Contains(t, b.Problem, "no workload labelled elastic.job=orphan,elastic.role=worker in namespace "+e.ns)
		code, stdout, _ := cli(t, nil, "status", "--etcd-endpoints", e.etcd.Endpoint(), "--job", "orphan")
		require.Equal(t, 0, code)
		assert.Contains(t, stdout, "no workload labelled")
		e.jobStillRuns("orphan")
	})
	t.Run("the workload has no scale subresource", func(t *testing.T) {
		t.Parallel()
		c := kubeCluster(t)
		dyn, err := dynamic.NewForConfig(c.Config)
		require.NoError(t, err)
		applyManifest(t, c, dyn, mustRead(t, filepath.Join(repoRoot, "testdata", "kubernetes", "noscale-crd.yaml")), "")
		e := newKubeEnv(t, kubeOptions{
			role:       strings.NewReplacer("batch.paddlepaddle.org", "example.org", "paddlejobs", "trainers").Replace(paddleJobRole),
			bridgeArgs: []string{"--workload-resource", "trainers.v1.example.org"},
		})
		e.apply("apiVersion: example.org/v1\nkind: Trainer\nmetadata:\n  name: t\n  labels: {elastic.job: noscale, elastic.role: worker}\n", e.ns)
		e.spec("noscale", membership.DefaultSpec(membership.NP{Min: 1, Max: 1}))
		b := e.bridgeStatus("noscale", func(b membership.BridgeStatus) bool { return b.Problem != "" })
		assert.Contains(t, b.Problem, "Trainer/t: it has no scale subresource")
		e.jobStillRuns("noscale")
	})
	t.Run("RBAC denies the scale subresource", func(t *testing.T) {
		t.Parallel()
		e := newKubeEnv(t, kubeOptions{role: strings.Replace(paddleJobRole, `resources: ["statefulsets/scale"]`, `resources: ["statefulsets/status"]`, 1)})
		// One pod runs; np 1:2 asks the bridge for a second, which the Role
		// does not let it ask for.
		e.spec("denied", membership.DefaultSpec(membership.NP{Min: 1, Max: 2}))
		sts := e.statefulSet("denied", "worker", 1, nil)
		b := e.bridgeStatus("denied", func(b membership.BridgeStatus) bool { return b.Problem != "" })
		assert.Contains(t, b.Problem, "RBAC denies to get the scale of StatefulSet/denied-worker")
		assert.Eventually(t, func() bool { return hasEvent(e.events(sts.Name), "ScaleFailed", "RBAC denies") }, 10*time.Second, 20*time.Millisecond)
		// The pod the StatefulSet already runs still trains.
		e.status("denied", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	})
	t.Run("no kubeconfig", func(t *testing.T) {
		t.Parallel()
		srv := etcdtestStart(t)
		serve := background(t, nil, "serve", "--etcd-endpoints", srv.Endpoint(), "--listen-metrics", "127.0.0.1:0",
			"--kubernetes", "--kubeconfig", "/nonexistent/kubeconfig")
		assert.NotEqual(t, 0, serve.wait(t), "a replica without its bridge must not look Ready")
		lines := strings.Split(strings.TrimSpace(serve.out.String()), "\n")
		last := lines[len(lines)-1]
		assert.Equal(t, `coordinator serve: --kubeconfig "/nonexistent/kubeconfig": no such file or directory (see 'coordinator serve --help')`, last)

		// Outside a pod, without --kubeconfig and without ~/.kube/config:
		// one line that says where it looked.
		home := t.TempDir()
		serve = background(t, []string{"HOME=" + home, "KUBECONFIG=", "KUBERNETES_SERVICE_HOST="},
			"serve", "--etcd-endpoints", srv.Endpoint(), "--listen-metrics", "127.0.0.1:0", "--kubernetes")
		assert.NotEqual(t, 0, serve.wait(t))
		lines = strings.Split(strings.TrimSpace(serve.out.String()), "\n")
		last = lines[len(lines)-1]
		assert.Contains(t, last, "coordinator serve: no Kubernetes cluster to talk to: not inside a pod")
		assert.Contains(t, last, filepath.Join(home, ".kube", "config")+"; give --kubeconfig")
		// Nothing etcd stores was touched: a coordinator started without
		// --kubernetes runs the job.
		background(t, nil, "serve", "--etcd-endpoints", srv.Endpoint(), "--listen-metrics", "127.0.0.1:0")
		env := &kubeEnv{t: t, etcd: srv}
		env.jobStillRuns("nokube")
	})
}

// bridgeStatus waits for the bridge's report on a job to satisfy ok.
func (e *kubeEnv) bridgeStatus(job string, ok func(membership.BridgeStatus) bool) membership.BridgeStatus {
	e.t.Helper()
	var last membership.BridgeStatus
	require.Eventually(e.t, func() bool {
		resp, err := e.etcd.Client(e.t).Get(e.t.Context(), membership.DefaultKeys().Bridge(job))
		if err != nil || len(resp.Kvs) == 0 {
			return false
		}
		last, err = membership.DecodeBridgeStatus(resp.Kvs[0].Value)
		return err == nil && ok(last)
	}, 30*time.Second, 20*time.Millisecond, "bridge status of %s; last %+v", job, &last)
	return last
}

// jobStillRuns runs a sidecar for the job on the host and waits for the job
// to succeed: the etcd side does not depend on the bridge.
func (e *kubeEnv) jobStillRuns(job string) {
	e.t.Helper()
	sidecar := background(e.t, []string{"TOY_DIR=" + e.t.TempDir(), "TOY_STEPS=2", "TOY_INTERVAL=0.05"},
		"sidecar", "--etcd-endpoints", e.etcd.Endpoint(), "--job", job, "--np", "1", "--node-id", job+"-host", "--host", "127.0.0.1",
		"--", "testdata/toytrainer.sh")
	assert.Equal(e.t, 0, sidecar.wait(e.t), "the job ran and succeeded without the bridge")
}
