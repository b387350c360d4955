package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge"
	"github.com/elastictraining/coordinator/operatorbridge/crds"
)

// applyCRDs applies the CRDs of deploy/ to the shared control plane.
func applyCRDs(t *testing.T, c *kubetest.Cluster, dyn dynamic.Interface) {
	t.Helper()
	for _, f := range crds.All() {
		applyManifest(t, c, dyn, mustRead(t, filepath.Join(repoRoot, "deploy", f.Name)), "")
	}
	require.Eventually(t, func() bool {
		_, err := dyn.Resource(jobv1.GroupVersionResource).List(t.Context(), metav1.ListOptions{Limit: 1})
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the ElasticJob CRD was never established")
}

// elasticJobYAML is an ElasticJob of the toy trainer.
func elasticJobYAML(name string, workers int, extra string) string {
	return elasticJobRunning(name, workers, extra, filepath.Join(repoRoot, "testdata", "toytrainer.sh"))
}

// elasticJobRunning is an ElasticJob of workers workers whose trainer runs
// command (YAML flow items), with extra spec fields.
func elasticJobRunning(name string, workers int, extra, command string) string {
	return fmt.Sprintf(`
apiVersion: elastictraining.io/v1
kind: ElasticJob
metadata:
  name: %s
spec:
  %s
  worker:
    replicas: %d
    template:
      spec:
        containers:
          - name: trainer
            image: trainer:v1
            command: [%s]
`, name, extra, workers, command)
}

// createJob creates a resource from YAML in the test's namespace and
// returns the API server's error.
func (e *kubeEnv) createJob(manifest string) error {
	var obj unstructured.Unstructured
	require.NoError(e.t, yaml.Unmarshal([]byte(manifest), &obj.Object))
	_, err := e.dyn.Resource(jobv1.GroupVersionResource).Namespace(e.ns).Create(e.t.Context(), &obj, metav1.CreateOptions{})
	return err
}

// jobStatus waits for an ElasticJob's status to satisfy ok.
func (e *kubeEnv) jobStatus(name, what string, ok func(jobv1.ElasticJobStatus) bool) jobv1.ElasticJobStatus {
	e.t.Helper()
	var last jobv1.ElasticJobStatus
	require.Eventually(e.t, func() bool {
		u, err := e.dyn.Resource(jobv1.GroupVersionResource).Namespace(e.ns).Get(e.t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		last = jobv1.ElasticJobStatus{}
		if raw, found := u.Object["status"].(map[string]any); found {
			require.NoError(e.t, fromUnstructured(raw, &last))
		}
		return ok(last)
	}, 90*time.Second, 20*time.Millisecond, "ElasticJob %s never %s; last status %+v\ncoordinator:\n%s", name, what, last, e.bridge.out)
	return last
}

func runningAt(n int) func(jobv1.ElasticJobStatus) bool {
	return func(s jobv1.ElasticJobStatus) bool {
		return s.Phase == jobv1.PhaseRunning && s.WorldSize == n && s.Ready == n
	}
}

// kubectl runs kubectl in the test's namespace from the repository's
// root, as a user at a terminal does, and returns what it printed; the
// test fails if it fails.
func (e *kubeEnv) kubectl(stdin string, args ...string) string {
	e.t.Helper()
	out, errOut, err := e.c.Kubectl(e.t.Context(), repoRoot, stdin, append([]string{"--namespace", e.ns}, args...)...)
	require.NoError(e.t, err, "kubectl %s: %s", strings.Join(args, " "), errOut)
	return out
}

// TestElasticJobRunsScalesThroughKubectlAndGoesWithItsResource creates a
// 4-worker ElasticJob with kubectl and follows it to Running, scales it
// with `kubectl scale` down and up (never reverted), deletes a pod mid-run
// (one new generation, resumed from the checkpoint), and deletes the job
// with kubectl: everything made for it goes, in Kubernetes and in etcd.
func TestElasticJobRunsScalesThroughKubectlAndGoesWithItsResource(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"}})
	applyCRDs(t, e.c, e.dyn)
	start := time.Now()
	assert.Equal(t, "elasticjob.elastictraining.io/train created\n",
		e.kubectl(elasticJobYAML("train", 4, "cleanPodPolicy: OnCompletion"), "apply", "-f", "-"))
	e.jobStatus("train", "Running at 4", runningAt(4))
	t.Logf("create → 4 trainers running: %s", time.Since(start).Round(time.Millisecond))
	// The StatefulSet's count comes with its own status, a moment apart.
	st := e.jobStatus("train", "4 replicas", func(s jobv1.ElasticJobStatus) bool { return s.Replicas == 4 })
	assert.Equal(t, "4", st.NP)
	assert.Equal(t, "elastic.job=train,elastic.role=worker", st.Selector)

	// What the controller made: a StatefulSet with the sidecar injected,
	// owned by the job, and the Service that governs it.
	sts, err := e.c.Client.AppsV1().StatefulSets(e.ns).Get(t.Context(), "train-worker", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, sts.OwnerReferences, 1)
	assert.Equal(t, "ElasticJob", sts.OwnerReferences[0].Kind)
	pod := sts.Spec.Template.Spec
	require.Len(t, pod.InitContainers, 1)
	assert.Equal(t, sidecarImage, pod.InitContainers[0].Image)
	assert.Equal(t, []string{"install", "/elastic/coordinator"}, pod.InitContainers[0].Args)
	assert.Equal(t, []string{"/elastic/coordinator", "sidecar", "--role=worker", "--hold-when-done", "--", filepath.Join(repoRoot, "testdata", "toytrainer.sh")},
		pod.Containers[0].Command)
	svc, err := e.c.Client.CoreV1().Services(e.ns).Get(t.Context(), "train", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "None", svc.Spec.ClusterIP)
	_, err = e.c.Client.CoreV1().ConfigMaps(e.ns).Get(t.Context(), operatorbridge.ConfigMapName("train"), metav1.GetOptions{})
	assert.NoError(t, err, "the bridge writes the endpoint ConfigMap")
	assert.True(t, hasEvent(e.events("train"), "Created", "StatefulSet train-worker"))
	// The job's goodput, as of the coordinator's last account of it.
	st = e.jobStatus("train", "a goodput", func(s jobv1.ElasticJobStatus) bool { return s.Goodput != "" })
	assert.Regexp(t, `^\d+\.\d%$`, st.Goodput)
	table := strings.Fields(e.kubectl("", "get", "elasticjobs", "-o", "wide"))
	require.GreaterOrEqual(t, len(table), 20, "kubectl get elasticjobs -o wide")
	assert.Equal(t, []string{"NAME", "PHASE", "NP", "READY", "WORLD", "GENERATION", "RESTARTS", "AGE", "GOODPUT", "MESSAGE", "PROBLEM"}, table[:11])
	assert.Equal(t, []string{"train", "Running", "4", "4", "4"}, table[11:16], "kubectl get elasticjobs -o wide")
	assert.Regexp(t, `^\d+\.\d%$`, table[19], "kubectl get elasticjobs -o wide: its goodput")

	// `kubectl scale`: down to 2, then up to 3, each never reverted.
	for _, n := range []int{2, 3} {
		start := time.Now()
		assert.Equal(t, "elasticjob.elastictraining.io/train scaled\n", e.kubectl("", "scale", "elasticjob/train", fmt.Sprintf("--replicas=%d", n)))
		e.jobStatus("train", fmt.Sprintf("Running at %d", n), runningAt(n))
		t.Logf("scale → %d trainers running: %s", n, time.Since(start).Round(time.Millisecond))
		require.Eventually(t, func() bool {
			s, err := e.c.Client.AppsV1().StatefulSets(e.ns).Get(t.Context(), "train-worker", metav1.GetOptions{})
			return err == nil && *s.Spec.Replicas == int32(n) && s.Status.Replicas == int32(n)
		}, 30*time.Second, 20*time.Millisecond)
		time.Sleep(2 * time.Second) // what a revert would take
		u, err := e.dyn.Resource(jobv1.GroupVersionResource).Namespace(e.ns).Get(t.Context(), "train", metav1.GetOptions{})
		require.NoError(t, err)
		replicas, _, _ := unstructured.NestedInt64(u.Object, "spec", "worker", "replicas")
		assert.Equal(t, int64(n), replicas, "the scale was reverted")
		spec, err := e.client.Status(t.Context(), "train")
		require.NoError(t, err)
		assert.Equal(t, membership.FixedNP(n), spec.NP)
	}
	assert.True(t, hasEvent(e.events("train"), "Scaling", "np 2 → 3"))

	// The etcd spec follows the resource: `coordinator scale` is refused.
	code, _, stderr := cli(t, nil, "scale", "--etcd-endpoints", e.etcd.Endpoint(), "--job", "train", "--np", "5")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "kubectl scale")

	// A pod deleted mid-run: one new generation, resumed.
	before := e.jobStatus("train", "Running at 3", runningAt(3))
	require.NoError(t, e.c.Client.CoreV1().Pods(e.ns).Delete(t.Context(), "train-worker-1", metav1.DeleteOptions{}))
	after := e.jobStatus("train", "Running at 3 again", func(s jobv1.ElasticJobStatus) bool {
		return runningAt(3)(s) && s.Generation > before.Generation
	})
	assert.Equal(t, before.Generation+1, after.Generation, "one restart for one pod deleted")
	assert.Equal(t, before.Restarts+1, after.Restarts, "a pod's loss is a restart")
	assert.Equal(t, 0, after.FailureRestarts, "a pod deleted is a membership change, not a failure: no budget spent")
	// Every trainer of the new generation resumed from its checkpoint. A
	// trainer logs its start a moment after its sidecar reports it running.
	var starts string
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(filepath.Join(e.toyDir, "train", "starts.log"))
		starts = string(data)
		return strings.Count(starts, fmt.Sprintf("gen=%d ", after.Generation)) == 3
	}, 30*time.Second, 20*time.Millisecond, "the trainers of generation %d never all started", after.Generation)
	for _, line := range strings.Split(starts, "\n") {
		if strings.HasPrefix(line, fmt.Sprintf("gen=%d ", after.Generation)) {
			assert.NotContains(t, line, " step=0 ", "a trainer of generation %d started from step 0", after.Generation)
		}
	}

	// An HorizontalPodAutoscaler scales it through the same subresource:
	// its minimum is enforced before any metric is read.
	_, err = e.c.Client.AutoscalingV2().HorizontalPodAutoscalers(e.ns).Create(t.Context(), &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "train"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: jobv1.Group + "/" + jobv1.Version, Kind: jobv1.Kind, Name: "train"},
			MinReplicas:    new(int32(4)), MaxReplicas: 4,
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	e.jobStatus("train", "Running at 4, the HPA's minimum", runningAt(4))

	// Deleted: everything goes, in Kubernetes and in etcd.
	e.kubectl("", "delete", "elasticjob", "train", "--wait=false")
	require.Eventually(t, func() bool {
		_, stsErr := e.c.Client.AppsV1().StatefulSets(e.ns).Get(t.Context(), "train-worker", metav1.GetOptions{})
		_, svcErr := e.c.Client.CoreV1().Services(e.ns).Get(t.Context(), "train", metav1.GetOptions{})
		_, cmErr := e.c.Client.CoreV1().ConfigMaps(e.ns).Get(t.Context(), operatorbridge.ConfigMapName("train"), metav1.GetOptions{})
		return apierrors.IsNotFound(stsErr) && apierrors.IsNotFound(svcErr) && apierrors.IsNotFound(cmErr) &&
			kubetest.RunningPods(t.Context(), e.c.Client, e.ns, "elastic.job=train") == 0
	}, 60*time.Second, 50*time.Millisecond, "what the job owned outlived it")
	require.Eventually(t, func() bool {
		resp, err := e.etcd.Client(t).Get(t.Context(), membership.DefaultKeys().Spec("train"), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	}, 30*time.Second, 50*time.Millisecond, "the job's etcd records outlived it")
}

// tableCell is the cell of a table printed by kubectl or the coordinator
// (a header line, then a line per row, cells without spaces up to the
// column asked for): the row whose first cell is row, under column.
func tableCell(t *testing.T, table, row, column string) string {
	t.Helper()
	lines := strings.Split(table, "\n")
	header := strings.Fields(lines[0])
	col := slices.Index(header, column)
	require.GreaterOrEqual(t, col, 0, "no column %s in\n%s", column, table)
	for _, l := range lines[1:] {
		if cells := strings.Fields(l); len(cells) > col && cells[0] == row {
			return cells[col]
		}
	}
	require.Failf(t, "no row", "no row %s in\n%s", row, table)
	return ""
}

func fromUnstructured(raw map[string]any, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(raw, into)
}

// TestServeOutsideAPodInjectsItsVersionsImage runs serve as from a
// workstation: outside a pod, its kubeconfig in ~/.kube/config, no
// --sidecar-image. A job's pods get the image `make image` tags for the
// binary's version, and the job runs.
func TestServeOutsideAPodInjectsItsVersionsImage(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, homeKubeconfig: true, defaultSidecarImage: true,
		toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"}})
	applyCRDs(t, e.c, e.dyn)
	e.kubectl(elasticJobYAML("outside", 1, ""), "apply", "-f", "-")
	e.jobStatus("outside", "Running at 1", runningAt(1))
	sts, err := e.c.Client.AppsV1().StatefulSets(e.ns).Get(t.Context(), "outside-worker", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, sts.Spec.Template.Spec.InitContainers, 1)
	assert.Equal(t, "elastic-coordinator:"+releaseVersion, sts.Spec.Template.Spec.InitContainers[0].Image)
	assert.Contains(t, e.bridge.out.String(), "no --sidecar-image outside a pod: the job resources' pods get this version's image")
}

// TestElasticJobCleanPodPolicyAndProblems runs jobs to their end: with
// OnCompletion their pods go, with Never they stay; a template the
// controller cannot wrap is reported in the status and an Event.
func TestElasticJobCleanPodPolicyAndProblems(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, toyEnv: []string{"TOY_STEPS=3", "TOY_INTERVAL=0.1"}})
	applyCRDs(t, e.c, e.dyn)
	for _, policy := range []string{"OnCompletion", "Never", "Always", "OnFailure"} {
		name := "done-" + strings.ToLower(policy)
		require.NoError(t, e.createJob(elasticJobYAML(name, 2, "cleanPodPolicy: "+policy)))
	}
	require.NoError(t, e.createJob(strings.Replace(elasticJobYAML("nocmd", 1, ""), "command:", "args:", 1)))
	// PaddlePaddle's heter parameter-server mode: a PS and a heterogeneous
	// trainer beside the worker.
	role := func(name string) string {
		return fmt.Sprintf("\n  %s: {replicas: 1, template: {spec: {containers: [{name: paddle, image: p, command: [%s]}]}}}", name, toyTrainer)
	}
	require.NoError(t, e.createJob(elasticJobYAML("hetero", 1, "withGloo: 0"+role("ps")+role("heter"))))

	for _, policy := range []string{"OnCompletion", "Never", "Always", "OnFailure"} {
		name := "done-" + strings.ToLower(policy)
		e.jobStatus(name, "Succeeded", func(s jobv1.ElasticJobStatus) bool { return s.Phase == jobv1.PhaseSucceeded })
		gone := policy == "OnCompletion" || policy == "Always"
		if gone {
			require.Eventually(t, func() bool {
				return kubetest.RunningPods(t.Context(), e.c.Client, e.ns, "elastic.job="+name) == 0
			}, 60*time.Second, 50*time.Millisecond, "cleanPodPolicy %s left the pods of a job that succeeded", policy)
		}
	}
	// The pods a policy keeps are still there once the others are gone.
	for _, name := range []string{"done-never", "done-onfailure"} {
		assert.Equal(t, 2, kubetest.RunningPods(t.Context(), e.c.Client, e.ns, "elastic.job="+name), name)
	}
	// Generation 1 ran and succeeded: kubectl, `coordinator status` and
	// `coordinator jobs` say generation 1, not that of the plan that
	// stopped the sidecars.
	assert.Equal(t, "1", tableCell(t, e.kubectl("", "get", "elasticjob", "done-never"), "done-never", "GENERATION"), "kubectl get")
	code, stdout, stderr := cli(t, nil, "status", "--etcd-endpoints", e.etcd.Endpoint(), "--job", "done-never")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "1", tableCell(t, stdout, "done-never", "GENERATION"), "coordinator status")
	code, stdout, stderr = cli(t, nil, "jobs", "--etcd-endpoints", e.etcd.Endpoint())
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "1", tableCell(t, stdout, "done-never", "GENERATION"), "coordinator jobs")
	e.jobStatus("hetero", "Succeeded", func(s jobv1.ElasticJobStatus) bool { return s.Phase == jobv1.PhaseSucceeded })
	// One pod, one worker: said in the singular.
	assert.True(t, slices.ContainsFunc(e.events("hetero"), func(ev corev1.Event) bool {
		return ev.Reason == "Created" && ev.Message == "StatefulSet hetero-worker with 1 pod"
	}), "the Created Event of a StatefulSet of one pod")
	assert.True(t, hasEvent(e.events("hetero-worker"), "Generation", "generation 1: 1 worker, 1 ps"), "the Generation Event of one worker")
	heter := e.podEnv("hetero", "hetero-heter-0")
	assert.Equal(t, "HETER_TRAINER", heter["TRAINING_ROLE"])
	worker := e.podEnv("hetero", "hetero-worker-0")
	assert.Equal(t, heter["PADDLE_CURRENT_ENDPOINT"], worker["PADDLE_HETER_ENDPOINTS"])
	assert.Equal(t, heter["PADDLE_PSERVERS_IP_PORT_LIST"], worker["PADDLE_PSERVERS_IP_PORT_LIST"])
	assert.NotEmpty(t, worker["PADDLE_PSERVERS_IP_PORT_LIST"])

	st := e.jobStatus("nocmd", "reported its template", func(s jobv1.ElasticJobStatus) bool { return s.Problem != "" })
	assert.Contains(t, st.Problem, "container trainer has no command")
	// Its image's registry cannot be reached here: said, and tried again.
	assert.Eventually(t, func() bool { return hasEvent(e.events("nocmd"), "ImageUnreadable", "no command") }, 10*time.Second, 50*time.Millisecond)

	// Deleted, whatever its policy: the job's pods, StatefulSets and
	// records go with it.
	for _, policy := range []string{"OnCompletion", "Never", "Always", "OnFailure"} {
		e.kubectl("", "delete", "elasticjob", "done-"+strings.ToLower(policy), "--wait=false")
	}
	for _, policy := range []string{"OnCompletion", "Never", "Always", "OnFailure"} {
		name := "done-" + strings.ToLower(policy)
		require.Eventually(t, func() bool {
			_, stsErr := e.c.Client.AppsV1().StatefulSets(e.ns).Get(t.Context(), name+"-worker", metav1.GetOptions{})
			resp, err := e.etcd.Client(t).Get(t.Context(), membership.DefaultKeys().Spec(name), clientv3.WithCountOnly())
			return apierrors.IsNotFound(stsErr) && err == nil && resp.Count == 0 &&
				kubetest.RunningPods(t.Context(), e.c.Client, e.ns, "elastic.job="+name) == 0
		}, 60*time.Second, 50*time.Millisecond, "what job %s (cleanPodPolicy %s) owned outlived it", name, policy)
	}
}

// TestAllNamespacesRunsTheJobsOfEveryNamespace runs the coordinator with
// deploy/all-namespaces' ClusterRole and --all-namespaces: an ElasticJob in
// another namespace than the coordinator's runs, with its Secret-free
// sidecars, its ConfigMap and its status.
//
// It runs alone, not in parallel: a coordinator of every namespace serves
// the jobs of every other test on the shared API server too, writing
// their status from an etcd of its own.
func TestAllNamespacesRunsTheJobsOfEveryNamespace(t *testing.T) {
	e := newKubeEnv(t, kubeOptions{injected: true, allNamespaces: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"}})
	role, cluster := rbacRules(t), mustRead(t, filepath.Join(repoRoot, "deploy", "all-namespaces", "clusterrole.yaml"))
	assert.Contains(t, cluster, role, "the ClusterRole has the Role's rules, no more and no fewer")
	applyCRDs(t, e.c, e.dyn)

	far := *e
	far.ns = e.ns + "-far"
	_, err := e.c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: far.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	startInjectedPodRunner(t, e.c.Client, far.ns, e.toyDir, []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"}, nil)
	require.NoError(t, far.createJob(elasticJobYAML("far", 2, "")))
	far.jobStatus("far", "Running at 2", runningAt(2))
	require.Eventually(t, func() bool {
		_, err := e.c.Client.CoreV1().ConfigMaps(far.ns).Get(t.Context(), operatorbridge.ConfigMapName("far"), metav1.GetOptions{})
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the bridge wrote no ConfigMap in the job's namespace")

	// The same name in the coordinator's namespace: the id is taken.
	require.NoError(t, e.createJob(elasticJobYAML("far", 1, "")))
	st := e.jobStatus("far", "told its id is taken", func(s jobv1.ElasticJobStatus) bool { return s.Problem != "" })
	assert.Contains(t, st.Problem, "job id far is in use in etcd by ElasticJob/"+far.ns+"/far/")
}

// TestAJobInANamespaceNotServedIsSaid applies an ElasticJob, as the user
// who forgot -n does, in a namespace the coordinator does not serve: it
// gets a NotServed Event naming the namespace to use. A job the
// coordinator serves gets none.
func TestAJobInANamespaceNotServedIsSaid(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, reportUnserved: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"}})
	applyCRDs(t, e.c, e.dyn)
	far := *e
	far.ns = e.ns + "-unserved"
	_, err := e.c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: far.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	far.kubectl(elasticJobYAML("lost", 1, ""), "apply", "-f", "-")
	e.kubectl(elasticJobYAML("found", 1, ""), "apply", "-f", "-")
	e.jobStatus("found", "Running at 1", runningAt(1))

	require.Eventually(t, func() bool { return hasEvent(far.events("lost"), "NotServed", "namespace "+e.ns) },
		30*time.Second, 100*time.Millisecond, "no NotServed Event on a job no coordinator serves\ncoordinator:\n%s", e.bridge.out)
	described := far.kubectl("", "describe", "elasticjob/lost")
	assert.Contains(t, described, "NotServed", "kubectl describe shows it")
	assert.Contains(t, described, "kubectl apply -n "+e.ns)
	time.Sleep(4 * time.Second) // a served job is as old as the grace now
	assert.False(t, hasEvent(e.events("found"), "NotServed", ""), "a served job was said unserved")
	assert.Len(t, slices.DeleteFunc(far.events("lost"), func(ev corev1.Event) bool { return ev.Reason != "NotServed" }), 1, "said once")
}

// TestAJobAppliedWhileEtcdIsDownRunsWhenItIsBack applies an ElasticJob
// while etcd is down, for longer than the controller's backoff grows in
// a few failures: it runs once etcd is back, with nobody touching it.
func TestAJobAppliedWhileEtcdIsDownRunsWhenItIsBack(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"}})
	applyCRDs(t, e.c, e.dyn)
	e.kubectl(elasticJobYAML("first", 1, ""), "apply", "-f", "-")
	e.jobStatus("first", "Running at 1", runningAt(1))

	e.etcd.Stop()
	e.kubectl(elasticJobYAML("later", 2, ""), "apply", "-f", "-")
	time.Sleep(15 * time.Second)
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "elastic.job=later"})
	require.NoError(t, err)
	assert.Empty(t, pods.Items, "pods were made for a job whose spec etcd never took")
	e.etcd.Restart(t)
	back := time.Now()
	e.jobStatus("later", "Running at 2", runningAt(2))
	t.Logf("etcd back → the job applied meanwhile running: %s", time.Since(back).Round(time.Millisecond))
	e.jobStatus("first", "Running at 1 still", runningAt(1))
}
