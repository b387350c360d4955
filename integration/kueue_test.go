package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
)

// kueueQueuesExample is docs/kubernetes.md's Kueue example of queues, as
// written there: the YAML block that starts with its comment.
func kueueQueuesExample(t *testing.T) string {
	doc := mustRead(t, filepath.Join(repoRoot, "docs", "kubernetes.md"))
	start := strings.Index(doc, "```yaml\n# Kueue: a ClusterQueue of 4 worker slots")
	require.GreaterOrEqual(t, start, 0, "docs/kubernetes.md has no Kueue example of queues")
	block := doc[start+len("```yaml\n"):]
	end := strings.Index(block, "```")
	require.Greater(t, end, 0)
	return block[:end]
}

// queuedJobYAML is an ElasticJob of testdata/savetrainer.py in a Kueue
// queue, its workers asking for a CPU each: np MIN:MAX, priority class
// class (none if empty), SAVE_STEPS steps if above 0.
func queuedJobYAML(name, queue, class string, least, most, steps int) string {
	labels := "kueue.x-k8s.io/queue-name: " + queue
	if class != "" {
		labels += "\n    kueue.x-k8s.io/priority-class: " + class
	}
	env := ""
	if steps > 0 {
		env = fmt.Sprintf("\n            env: [{name: SAVE_STEPS, value: %q}]", fmt.Sprint(steps))
	}
	return fmt.Sprintf(`
apiVersion: elastictraining.io/v1
kind: ElasticJob
metadata:
  name: %s
  labels:
    %s
spec:
  worker:
    replicas: %d
    minReplicas: %d
    template:
      spec:
        containers:
          - name: trainer
            image: trainer:v1
            command: [/usr/bin/python3, %s]
            resources: {requests: {cpu: "1"}}%s
`, name, labels, most, least, filepath.Join(repoRoot, "testdata", "savetrainer.py"), env)
}

// admittedCondition is a job's Admitted condition, or nil.
func admittedCondition(s jobv1.ElasticJobStatus) *metav1.Condition {
	return meta.FindStatusCondition(s.Conditions, jobv1.ConditionAdmitted)
}

// waitingInQueue reports a job suspended by its queue, with no pods.
func waitingInQueue(s jobv1.ElasticJobStatus) bool {
	c := admittedCondition(s)
	return s.Phase == jobv1.PhaseSuspended && c != nil && c.Status == metav1.ConditionFalse
}

// podsOf counts a job's pods.
func (e *kubeEnv) podsOf(job string) int {
	pods, err := e.c.Client.CoreV1().Pods(e.ns).List(e.t.Context(), metav1.ListOptions{LabelSelector: jobv1.LabelJob + "=" + job})
	require.NoError(e.t, err)
	return len(pods.Items)
}

// stage logs what `kubectl get` shows of the jobs and their Workloads.
func (e *kubeEnv) stage(what string) {
	e.t.Helper()
	e.t.Logf("%s:\n$ kubectl get elasticjobs\n%s$ kubectl get workloads\n%s", what,
		e.kubectl("", "get", "elasticjobs"), e.kubectl("", "get", "workloads"))
}

// TestKueueAdmitsPreemptsAndRequeuesElasticJobs runs ElasticJobs in the
// docs' ClusterQueue of 4 worker slots, on real Kueue: A (np 2:4) is
// admitted at 4 and trains; B (2:4) waits suspended with no pods; C (2
// workers) of a higher priority preempts A, which stops gracefully and
// resumes from its saved state, no step lost, at the 2 workers the queue
// then admits; B runs when C ends; a job of a queue that does not exist
// stays suspended and says so.
func TestKueueAdmitsPreemptsAndRequeuesElasticJobs(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, kueue: true})
	applyCRDs(t, e.c, e.dyn)
	e.apply(strings.ReplaceAll(kueueQueuesExample(t), "namespace: elastic-system", "namespace: "+e.ns), "")

	e.kubectl(queuedJobYAML("job-a", "training", "research", 2, 4, 0), "apply", "-f", "-")
	a := e.jobStatus("job-a", "Running at 4, admitted", func(s jobv1.ElasticJobStatus) bool {
		c := admittedCondition(s)
		return runningAt(4)(s) && c != nil && c.Status == metav1.ConditionTrue
	})
	dirA := filepath.Join(e.toyDir, "job-a")
	require.Eventually(t, func() bool { return savedSteps(t, dirA, 4)[3] >= 20 }, 60*time.Second, 20*time.Millisecond, "A's ranks never trained 20 steps")

	e.kubectl(queuedJobYAML("job-b", "training", "research", 2, 4, 0), "apply", "-f", "-")
	e.jobStatus("job-b", "waiting suspended in the queue", waitingInQueue)
	assert.Zero(t, e.podsOf("job-b"), "B waits with no pods")
	e.kubectl("", "patch", "elasticjob/job-b", "--type=merge", "-p", `{"spec":{"suspend":false}}`)
	require.Eventually(t, func() bool {
		return hasEvent(e.events("job-b"), "Stopped", "suspended again") &&
			strings.TrimSpace(e.kubectl("", "get", "elasticjob/job-b", "-o", "jsonpath={.spec.suspend}")) == "true"
	}, 30*time.Second, 50*time.Millisecond, "B unsuspended by hand was not suspended again")
	assert.Zero(t, e.podsOf("job-b"), "nor did it get pods")
	e.stage("A admitted at 4 and training; B waiting")

	e.kubectl(queuedJobYAML("job-c", "training", "production", 2, 2, 100), "apply", "-f", "-")
	stopped := e.jobStatus("job-a", "Suspended: preempted", func(s jobv1.ElasticJobStatus) bool {
		return s.Phase == jobv1.PhaseSuspended
	})
	assert.Zero(t, stopped.Restarts, "a preemption is no fault")
	saved := savedSteps(t, dirA, 4)
	e.jobStatus("job-c", "Running at 2", runningAt(2))
	e.stage("C preempted A")
	resumed := e.jobStatus("job-a", "Running at 2 again", func(s jobv1.ElasticJobStatus) bool {
		return runningAt(2)(s) && s.Generation > a.Generation
	})
	var steps []int
	require.Eventually(t, func() bool {
		steps = resumedSteps(t, dirA, resumed.Generation, 2)
		return steps[0] >= 0 && steps[1] >= 0
	}, 30*time.Second, 20*time.Millisecond, "A's trainers of generation %d never started", resumed.Generation)
	assertNoStepLost(t, saved[:2], steps)
	t.Logf("A's ranks 0 and 1 saved steps %v before the preemption and resumed from %v", saved[:2], steps)
	assert.Equal(t, jobv1.PhaseSuspended, e.resourceStatus("job-b").Phase, "B still waits")
	e.stage("A requeued and admitted at 2 beside C")

	e.jobStatus("job-c", "Succeeded", func(s jobv1.ElasticJobStatus) bool { return s.Phase == jobv1.PhaseSucceeded })
	e.jobStatus("job-b", "Running at 2 once C ended", runningAt(2))
	require.Eventually(t, func() bool {
		return e.kubectl("", "get", "workloads", "-l", jobv1.LabelJob+"=job-c", "-o", "jsonpath={.items[0].metadata.finalizers}") == ""
	}, 30*time.Second, 50*time.Millisecond, "C's finished Workload kept its finalizer")
	e.stage("C ended; B runs")

	e.kubectl(queuedJobYAML("job-d", "nowhere", "", 1, 1, 0), "apply", "-f", "-")
	d := e.jobStatus("job-d", "suspended, its queue missing", func(s jobv1.ElasticJobStatus) bool {
		return waitingInQueue(s) && strings.Contains(admittedCondition(s).Message, "LocalQueue nowhere does not exist")
	})
	assert.Contains(t, d.Problem, "LocalQueue nowhere does not exist in namespace "+e.ns)
	c := admittedCondition(d)
	t.Logf("D's condition %s=%s (%s): %s", c.Type, c.Status, c.Reason, c.Message)
	assert.Zero(t, e.podsOf("job-d"))
	e.stage("D's queue missing")
}

// resourceStatus is an ElasticJob's status now.
func (e *kubeEnv) resourceStatus(name string) jobv1.ElasticJobStatus {
	e.t.Helper()
	u, err := e.dyn.Resource(jobv1.GroupVersionResource).Namespace(e.ns).Get(e.t.Context(), name, metav1.GetOptions{})
	require.NoError(e.t, err)
	var s jobv1.ElasticJobStatus
	if raw, ok := u.Object["status"].(map[string]any); ok {
		require.NoError(e.t, fromUnstructured(raw, &s))
	}
	return s
}

// TestAJobAdmittedBelowItsMaximumGrowsWithinItsQueue: E (np 2:4) is
// admitted at 2 beside F (2 workers) in a ClusterQueue of 4 worker slots;
// when F ends, E asks Kueue for a slice of 4 and, its generation running
// on until the slice is admitted, grows to 4 without being suspended; its
// first Workload is finished, replaced.
func TestAJobAdmittedBelowItsMaximumGrowsWithinItsQueue(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, kueue: true})
	applyCRDs(t, e.c, e.dyn)
	e.queue("grow", 4)

	e.kubectl(queuedJobYAML("job-f", "grow", "", 2, 2, 120), "apply", "-f", "-")
	e.jobStatus("job-f", "Running at 2", runningAt(2))
	e.kubectl(queuedJobYAML("job-e", "grow", "", 2, 4, 0), "apply", "-f", "-")
	small := e.jobStatus("job-e", "admitted at 2, Running", func(s jobv1.ElasticJobStatus) bool {
		c := admittedCondition(s)
		return runningAt(2)(s) && c != nil && c.Status == metav1.ConditionTrue
	})
	e.stage("E admitted at 2 beside F")

	e.jobStatus("job-f", "Succeeded", func(s jobv1.ElasticJobStatus) bool { return s.Phase == jobv1.PhaseSucceeded })
	grown := e.jobStatus("job-e", "Running at 4", func(s jobv1.ElasticJobStatus) bool {
		return runningAt(4)(s) && s.Generation > small.Generation
	})
	e.stage("F ended; E grew to 4")
	assert.Equal(t, small.Generation+1, grown.Generation, "one restart, at the larger size")
	assert.True(t, hasEvent(e.events("job-e"), "Growing", "asking for 4 worker pods"), "E asked for a slice")
	assert.False(t, hasEvent(e.events("job-e"), jobv1.PhaseSuspended, ""), "E was never suspended to grow")
	finished := e.kubectl("", "get", "workloads", "-l", jobv1.LabelJob+"=job-e",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Finished")].reason}{"\n"}{end}`)
	assert.Contains(t, finished, "WorkloadSliceReplaced", "E's first Workload is finished, replaced:\n%s", finished)
}

// TestQueuedPaddleJobAndMSJobRunAsAdmitted: a PaddleJob and an MSJob, as
// their operators define them, in a ClusterQueue of 2 worker slots. The
// PaddleJob is admitted and runs, its annotation elastic.suspend kept
// "false"; the MSJob waits with runPolicy.suspend true and no pods. When
// the PaddleJob is deleted its Workload goes with it, and the MSJob runs.
func TestQueuedPaddleJobAndMSJobRunAsAdmitted(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, kueue: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"}})
	applyCRDs(t, e.c, e.dyn)
	e.queue("kinds", 2)
	e.kubectl(`
apiVersion: batch.paddlepaddle.org/v1
kind: PaddleJob
metadata:
  name: paddle
  labels: {kueue.x-k8s.io/queue-name: kinds}
spec:
  worker:
    replicas: 2
    template:
      spec:
        containers:
          - name: paddle
            image: paddle:v1
            command: [/bin/sh, -c, train]
            resources: {requests: {cpu: "1"}}
`, "apply", "-f", "-")
	jsonpath := func(resource, path string) string {
		return strings.TrimSpace(e.kubectl("", "get", resource, "-o", "jsonpath="+path))
	}
	require.Eventually(t, func() bool {
		return jsonpath("paddlejob/paddle", "{.status.phase}") == "Running" && e.podsOf("paddle") == 2
	}, 60*time.Second, 50*time.Millisecond, "the PaddleJob never ran")
	assert.Equal(t, "false", jsonpath("paddlejob/paddle", `{.metadata.annotations.elastic\.suspend}`), "admitted: its suspend annotation is false")

	e.kubectl(`
apiVersion: mindspore.gitee.com/v1
kind: MSJob
metadata:
  name: mindspore
  labels: {kueue.x-k8s.io/queue-name: kinds}
spec:
  msReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: mindspore
              image: mindspore:v1
              command: [/bin/sh, -c, train]
              resources: {requests: {cpu: "1"}}
`, "apply", "-f", "-")
	require.Eventually(t, func() bool {
		return jsonpath("msjob/mindspore", "{.spec.runPolicy.suspend}") == "true"
	}, 30*time.Second, 50*time.Millisecond, "the MSJob was not suspended while it waits")
	time.Sleep(time.Second)
	assert.Zero(t, e.podsOf("mindspore"), "the MSJob waits with no pods")
	e.stage("the PaddleJob admitted; the MSJob waiting")

	e.kubectl("", "delete", "paddlejob/paddle", "--wait=false")
	require.Eventually(t, func() bool {
		return !strings.Contains(jsonpath("workloads", "{.items[*].metadata.name}"), "paddlejob-paddle-")
	}, 20*time.Second, 50*time.Millisecond, "the deleted PaddleJob's Workload never went")
	require.Eventually(t, func() bool {
		return jsonpath("msjob/mindspore", "{.spec.runPolicy.suspend}") == "false" && e.podsOf("mindspore") == 2
	}, 60*time.Second, 50*time.Millisecond, "the MSJob never ran once the PaddleJob was gone")
}
