package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/operatorbridge/admission"
)

// newQueueEnv is a test's namespace with Kueue and the job CRDs, and
// there a LocalQueue "q" of a ClusterQueue of cpus CPUs.
func newQueueEnv(t *testing.T, cpus int, o kubeOptions) *kubeEnv {
	t.Helper()
	o.injected, o.kueue = true, true
	e := newKubeEnv(t, o)
	applyCRDs(t, e.c, e.dyn)
	e.queue("q", cpus)
	return e
}

// queue makes a ResourceFlavor and a ClusterQueue of cpus CPUs, both
// named NAME-NAMESPACE (they are the cluster's), and the LocalQueue name
// of the test's namespace in it.
func (e *kubeEnv) queue(name string, cpus int) {
	e.t.Helper()
	e.apply(fmt.Sprintf(`
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: %[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [cpu]
      flavors: [{name: %[1]s, resources: [{name: cpu, nominalQuota: %[4]d}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: %[2]s, namespace: %[3]s}
spec: {clusterQueue: %[1]s}
`, name+"-"+e.ns, name, e.ns, cpus), "")
}

// livePods counts a job's pods that are not being deleted.
func (e *kubeEnv) livePods(job string) int {
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(e.t.Context(), metav1.ListOptions{LabelSelector: jobv1.LabelJob + "=" + job})
	require.NoError(e.t, err)
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// neverMoreThan fails if the job ever has more than most live pods within d.
func (e *kubeEnv) neverMoreThan(job string, most int, d time.Duration, why string) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if n := e.livePods(job); n > most {
			e.stage("over quota")
			e.t.Fatalf("%s: job %s has %d pods, more than the %d its admission allows\ncoordinator:\n%s", why, job, n, most, tail(e.bridge.out.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// An admitted job whose reconcile cannot read Kueue's objects (here its
// WorkloadPriorityClass: deploy/kueue's ClusterRoleBinding is gone; any
// API error, a throttle or a timeout, does the same) keeps to its
// admission: np 1:4 admitted at 2 in a ClusterQueue of 2 CPUs never runs
// more than 2 pods. Nothing is written while Kueue cannot be read.
func TestAQueuedJobKeepsToItsAdmissionWhileKueueCannotBeRead(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, 2, kubeOptions{})
	e.apply("apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {name: small-low}\nvalue: 10\n", "")
	e.kubectl(queuedJobYAML("job-x", "q", "small-low", 1, 4, 0), "apply", "-f", "-")
	e.jobStatus("job-x", "Running at 2, admitted", func(s jobv1.ElasticJobStatus) bool {
		c := admittedCondition(s)
		return runningAt(2)(s) && c != nil && c.Status == metav1.ConditionTrue
	})
	require.NoError(t, e.c.Client.RbacV1().ClusterRoleBindings().Delete(t.Context(), "elastic-kueue-"+e.ns, metav1.DeleteOptions{}))
	// The job below its maximum is looked at again every 5 s (growth).
	e.neverMoreThan("job-x", 2, 20*time.Second, "after an API error in admit")
}

// A job whose queue label is taken off while it is admitted stays Kueue's,
// as Kueue's own integrations refuse that change on a running job: np 1:4
// admitted at 2 in a ClusterQueue of 2 CPUs never runs more than 2 pods,
// and its status says why.
func TestAnAdmittedJobStaysKueuesWhenItsQueueLabelIsRemoved(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, 2, kubeOptions{})
	e.kubectl(queuedJobYAML("job-l", "q", "", 1, 4, 0), "apply", "-f", "-")
	e.jobStatus("job-l", "Running at 2, admitted", func(s jobv1.ElasticJobStatus) bool {
		c := admittedCondition(s)
		return runningAt(2)(s) && c != nil && c.Status == metav1.ConditionTrue
	})
	e.kubectl("", "label", "elasticjob/job-l", admission.QueueLabel+"-")
	e.neverMoreThan("job-l", 2, 15*time.Second, "after its queue label was removed")
	assert.Contains(t, e.resourceStatus("job-l").Problem, "was removed while the job holds its admission in LocalQueue q")
}

// `kubectl scale` down of an admitted job: np 2:4 admitted at 4, scaled
// to 2, runs at 2, and its Workload gives back 2 worker pods
// (reclaimablePods), so that Kueue frees their quota.
func TestAnAdmittedJobScaledDownRunsSmallerAndGivesQuotaBack(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, 4, kubeOptions{})
	e.kubectl(queuedJobYAML("job-s", "q", "", 2, 4, 0), "apply", "-f", "-")
	e.jobStatus("job-s", "Running at 4, admitted", runningAt(4))
	e.kubectl("", "scale", "elasticjob/job-s", "--replicas=2")
	var last jobv1.ElasticJobStatus
	ok := assert.Eventually(t, func() bool {
		last = e.resourceStatus("job-s")
		return runningAt(2)(last)
	}, 45*time.Second, 200*time.Millisecond, "scaled to 2, the job never ran at 2")
	if !ok {
		spec, _ := e.client.Spec(t.Context(), "job-s")
		t.Logf("last status: phase %s world %d ready %d; etcd np %s", last.Phase, last.WorldSize, last.Ready, spec.Workers())
		e.stage("after kubectl scale --replicas=2")
	}
	require.Eventually(t, func() bool {
		return e.kubectl("", "get", "workloads", "-l", jobv1.LabelJob+"=job-s", "-o", "jsonpath={.items[0].status.reclaimablePods[0].count}") == "2"
	}, 30*time.Second, 100*time.Millisecond, "the Workload never gave back 2 worker pods")
	require.Eventually(t, func() bool {
		return e.kubectl("", "get", "clusterqueue", "q-"+e.ns, "-o", "jsonpath={.status.flavorsReservation[0].resources[0].total}") == "2"
	}, 30*time.Second, 100*time.Millisecond, "Kueue still reserves 4 CPUs for the job: %s",
		e.kubectl("", "get", "clusterqueue", "q-"+e.ns, "-o", "jsonpath={.status.flavorsReservation}"))
}

// `kubectl delete workload` of an admitted job: the job stops, the
// Workload goes once nothing of the job runs (its quota with it), and a
// new Workload is admitted: the job runs again.
func TestAJobWhoseWorkloadIsDeletedStopsAndIsAdmittedAgain(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, 2, kubeOptions{})
	e.kubectl(queuedJobYAML("job-w", "q", "", 2, 2, 0), "apply", "-f", "-")
	first := e.jobStatus("job-w", "Running at 2", runningAt(2))
	name := strings.TrimSpace(e.kubectl("", "get", "workloads", "-l", jobv1.LabelJob+"=job-w", "-o", "jsonpath={.items[0].metadata.name}"))
	require.NotEmpty(t, name)
	e.kubectl("", "delete", "workload", name, "--wait=false")
	ok := assert.Eventually(t, func() bool {
		s := e.resourceStatus("job-w")
		return runningAt(2)(s) && s.Generation > first.Generation
	}, 60*time.Second, 200*time.Millisecond, "the job never ran again after its Workload was deleted")
	if !ok {
		e.stage("after kubectl delete workload")
		t.Logf("workload: %s", e.kubectl("", "get", "workloads", "-o", "jsonpath={range .items[*]}{.metadata.name} deletion={.metadata.deletionTimestamp} finalizers={.metadata.finalizers} admission={.status.admission.clusterQueue}{\"\\n\"}{end}"))
	}
}

// `kubectl delete --cascade=foreground` (as Argo CD and many tools delete)
// of a queued job ends: its Workload, which blocks its owner's deletion,
// loses its finalizer and goes.
func TestAQueuedJobDeletedInTheForegroundGoes(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, 2, kubeOptions{})
	e.kubectl(queuedJobYAML("job-f", "q", "", 2, 2, 0), "apply", "-f", "-")
	e.jobStatus("job-f", "Running at 2", runningAt(2))
	e.kubectl("", "delete", "elasticjob/job-f", "--cascade=foreground", "--wait=false")
	ok := assert.Eventually(t, func() bool {
		_, err := e.dyn.Resource(jobv1.GroupVersionResource).Namespace(e.ns).Get(t.Context(), "job-f", metav1.GetOptions{})
		return err != nil
	}, 60*time.Second, 200*time.Millisecond, "the job deleted in the foreground was never gone")
	if !ok {
		t.Logf("workloads: %s", e.kubectl("", "get", "workloads", "-o", "jsonpath={range .items[*]}{.metadata.name} deletion={.metadata.deletionTimestamp} finalizers={.metadata.finalizers}{\"\\n\"}{end}"))
	}
}

// An admitted job scaled down (np 2:4 admitted at 4 in a queue of 4,
// scaled to 2) gives its quota to another job (B, 2 workers); scaled back
// up to 4 it runs no more than the 2 Kueue still reserves for it.
func TestAJobScaledDownAndUpKeepsToWhatKueueReserves(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, 4, kubeOptions{})
	e.kubectl(queuedJobYAML("job-a", "q", "", 2, 4, 0), "apply", "-f", "-")
	e.jobStatus("job-a", "Running at 4", runningAt(4))
	e.kubectl("", "scale", "elasticjob/job-a", "--replicas=2")
	e.jobStatus("job-a", "Running at 2", runningAt(2))
	e.kubectl(queuedJobYAML("job-b", "q", "", 2, 2, 0), "apply", "-f", "-")
	e.jobStatus("job-b", "Running at 2", runningAt(2))
	e.kubectl("", "scale", "elasticjob/job-a", "--replicas=4")
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if a, b := e.livePods("job-a"), e.livePods("job-b"); a+b > 4 || a > 2 {
			e.stage("over quota")
			t.Fatalf("job-a has %d pods and job-b %d: more than the queue's 4 CPUs\n%s", a, b, tail(e.bridge.out.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// `coordinator serve` killed and started again while a queued job runs
// admitted: the new leader's term stops nothing, though its view of the
// Workloads starts empty.
func TestALeaderRestartLeavesAnAdmittedJobRunning(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, 2, kubeOptions{})
	e.kubectl(queuedJobYAML("job-r", "q", "", 2, 2, 0), "apply", "-f", "-")
	first := e.jobStatus("job-r", "Running at 2", runningAt(2))
	args := e.bridge.cmd.Args[1:]
	require.NoError(t, e.bridge.cmd.Process.Kill())
	<-e.bridge.done
	e.bridge = background(t, nil, args...)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if s := e.resourceStatus("job-r"); s.Phase == jobv1.PhaseSuspended || s.Generation > first.Generation || e.livePods("job-r") < 2 {
			e.stage("stopped")
			t.Fatalf("the admitted job stopped after the restart: phase %s, generation %d (was %d), %d pods\n%s",
				s.Phase, s.Generation, first.Generation, e.livePods("job-r"), tail(e.bridge.out.String(), 6000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// An autoscaled ElasticJob (minReplicas 1, maxReplicas 4, replicas 2) in
// a queue of 4 CPUs under `serve --autoscale --kueue`: Kueue admits it at
// its 2 replicas, and the autoscaler leaves it to Kueue, saying so, and
// its replicas alone.
func TestTheAutoscalerLeavesAQueuedJobToKueue(t *testing.T) {
	t.Parallel()
	e := newQueueEnv(t, 4, kubeOptions{autoscale: true, bridgeArgs: []string{"--autoscale-cooldown", "10ms", "--autoscale-period", "1s"}})
	manifest := queuedJobYAML("job-auto", "q", "", 1, 2, 0)
	manifest = strings.Replace(manifest, "    minReplicas: 1\n", "    minReplicas: 1\n    maxReplicas: 4\n", 1)
	e.kubectl(manifest, "apply", "-f", "-")
	e.jobStatus("job-auto", "Running at 2", runningAt(2))
	require.Eventually(t, func() bool { return strings.Contains(e.bridge.out.String(), "job left to Kueue") }, 30*time.Second, 100*time.Millisecond,
		"the autoscaler never said it leaves the job to Kueue")
	assert.Equal(t, "2", strings.TrimSpace(e.kubectl("", "get", "elasticjob/job-auto", "-o", "jsonpath={.spec.worker.replicas}")))
	assert.Equal(t, 2, e.livePods("job-auto"))
}
