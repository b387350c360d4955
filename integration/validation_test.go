package integration

// What the CRDs of deploy/ let the API server refuse, and what they let
// through to be run within the job's bounds.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
)

// TestABadJobIsRefusedNamingTheField sends the API server jobs it must
// refuse, each with a message that names what is wrong.
func TestABadJobIsRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	c := kubeCluster(t)
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	applyCRDs(t, c, dyn)
	e := &kubeEnv{t: t, c: c, dyn: dyn, ns: "default"}
	// What a user sees.
	_, stderr, err := c.Kubectl(t.Context(), repoRoot, elasticJobYAML("bad0", 2, "cleanPodPolicy: Sometimes\n  faultTolerance: 3"), "apply", "-f", "-")
	require.Error(t, err)
	assert.Contains(t, stderr, `The ElasticJob "bad0" is invalid`)
	assert.Contains(t, stderr, `spec.cleanPodPolicy: Unsupported value: "Sometimes"`)
	assert.Contains(t, stderr, `spec.faultTolerance: Unsupported value: 3`)
	for _, tc := range []struct{ name, manifest, want string }{
		{"clean pod policy", elasticJobYAML("bad1", 2, "cleanPodPolicy: Sometimes"), `spec.cleanPodPolicy: Unsupported value: "Sometimes"`},
		{"two schedulers", elasticJobYAML("bad2", 2, "scheduler: {replicas: 2, template: {spec: {containers: [{name: s, image: s}]}}}"),
			"spec.scheduler.replicas: Invalid value: 2: MindSpore runs one scheduler at most"},
		{"min above max", strings.Replace(elasticJobYAML("bad3", 2, ""), "replicas: 2", "replicas: 2\n    minReplicas: 3", 1),
			"spec.worker.minReplicas: Invalid value: 3: must not exceed spec.worker.replicas (2)"},
		{"no workers", elasticJobYAML("bad4", 0, ""), "spec.worker.replicas: Invalid value: 0: must be at least 1: a job needs a worker"},
		{"fault tolerance", elasticJobYAML("bad5", 2, "faultTolerance: 3"), "spec.faultTolerance: Unsupported value: 3"},
		{"no worker", "apiVersion: elastictraining.io/v1\nkind: ElasticJob\nmetadata: {name: bad6}\nspec: {maxRestarts: 1}\n", "spec.worker: Required value"},
		{"no containers", "apiVersion: elastictraining.io/v1\nkind: ElasticJob\nmetadata: {name: bad7}\nspec: {worker: {replicas: 1, template: {spec: {containers: []}}}}\n",
			"spec.worker.template.spec.containers: Invalid value"},
		{"long name", elasticJobYAML("a-job-whose-name-is-far-too-long-for-its-pods", 2, ""),
			`metadata.name: Invalid value: "a-job-whose-name-is-far-too-long-for-its-pods": 45 characters, at most 40`},
		{"dotted name", elasticJobYAML("bad.name", 2, ""), `metadata.name: Invalid value: "bad.name": not a DNS-1123 label`},
		{"command a string", strings.Replace(elasticJobYAML("bad8", 2, ""), "command: [", "command: x #", 1),
			"spec.worker.template.spec.containers[0].command: Invalid value: \"string\""},
		{"container name", strings.Replace(elasticJobYAML("bad9", 2, ""), "name: trainer", "name: Bad_Name", 1),
			"spec.worker.template.spec.containers[0].name: Invalid value: \"Bad_Name\""},
		{"a quantity", strings.Replace(elasticJobYAML("bad10", 2, ""), "image: trainer:v1", "image: trainer:v1\n            resources: {limits: {cpu: abc}}", 1),
			"spec.worker.template.spec.containers[0].resources.limits.cpu: Invalid value: \"abc\""},
		{"a label", strings.Replace(elasticJobYAML("bad11", 2, ""), "    template:\n", "    template:\n      metadata: {labels: {tier: 1}}\n", 1),
			"spec.worker.template.metadata.labels.tier: Invalid value: \"integer\""},
		{"above the autoscaler's bound", strings.Replace(elasticJobYAML("bad12", 4, ""), "replicas: 4", "replicas: 4\n    maxReplicas: 3", 1),
			"spec.worker.replicas: Invalid value: 4: must not exceed spec.worker.maxReplicas (3)"},
		{"a hang timeout shorter than the watch honours", elasticJobYAML("bad13", 2, "hangTimeout: 1ms"),
			`spec.hangTimeout: Invalid value: "1ms": want 500ms or more, the least the hang watch honours; 0 (off) or auto`},
		{"a start-up timeout too", elasticJobYAML("bad14", 2, "startupTimeout: 100ms"), `spec.startupTimeout: Invalid value: "100ms": want 500ms or more`},
	} {
		err := e.createJob(tc.manifest)
		require.Error(t, err, tc.name)
		assert.True(t, apierrors.IsInvalid(err), "%s: %v", tc.name, err)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}

	// A job with no worker, of each kind, is refused, in one message
	// that names the field and its value; a negative count too; and a
	// PaddleJob created outside its bounds, as an ElasticJob is.
	template := "template: {spec: {containers: [{name: t, image: t}]}}"
	for _, tc := range []struct{ name, manifest, want string }{
		{"ElasticJob, -1 workers", elasticJobYAML("neg", -1, ""),
			`The ElasticJob "neg" is invalid: .spec.worker.replicas: Invalid value: -1: should be a non-negative integer`},
		{"PaddleJob, 0 workers", "apiVersion: batch.paddlepaddle.org/v1\nkind: PaddleJob\nmetadata: {name: nowork}\nspec: {worker: {replicas: 0, " + template + "}}\n",
			`The PaddleJob "nowork" is invalid: spec.worker.replicas: Invalid value: 0: must be at least 1: a PaddleJob needs a worker`},
		{"PaddleJob, -1 workers", "apiVersion: batch.paddlepaddle.org/v1\nkind: PaddleJob\nmetadata: {name: neg}\nspec: {worker: {replicas: -1, " + template + "}}\n",
			`The PaddleJob "neg" is invalid: .spec.worker.replicas: Invalid value: -1: should be a non-negative integer`},
		{"PaddleJob above its limits", "apiVersion: batch.paddlepaddle.org/v1\nkind: PaddleJob\nmetadata: {name: over}\nspec: {worker: {replicas: 3, limits: 2, " + template + "}}\n",
			`The PaddleJob "over" is invalid: spec.worker.replicas: Invalid value: 3: must not exceed spec.worker.limits (2)`},
		{"PaddleJob below its requests", "apiVersion: batch.paddlepaddle.org/v1\nkind: PaddleJob\nmetadata: {name: under}\nspec: {worker: {replicas: 1, requests: 2, limits: 3, " + template + "}}\n",
			`The PaddleJob "under" is invalid: spec.worker.replicas: Invalid value: 1: must not be below spec.worker.requests (2)`},
		{"PaddleJob requests none", "apiVersion: batch.paddlepaddle.org/v1\nkind: PaddleJob\nmetadata: {name: none}\nspec: {worker: {replicas: 2, requests: 0, limits: 3, " + template + "}}\n",
			`The PaddleJob "none" is invalid: spec.worker.requests: Invalid value: 0: must be within 1..spec.worker.limits (3)`},
		{"MSJob, 0 workers", "apiVersion: mindspore.gitee.com/v1\nkind: MSJob\nmetadata: {name: nowork}\nspec: {msReplicaSpecs: {Worker: {replicas: 0, " + template + "}}}\n",
			`The MSJob "nowork" is invalid: spec.msReplicaSpecs.Worker.replicas: Invalid value: 0: must be at least 1: an MSJob needs a worker`},
		{"MSJob, -1 workers", "apiVersion: mindspore.gitee.com/v1\nkind: MSJob\nmetadata: {name: neg}\nspec: {msReplicaSpecs: {Worker: {replicas: -1, " + template + "}}}\n",
			`The MSJob "neg" is invalid: .spec.msReplicaSpecs.Worker.replicas: Invalid value: -1: should be a non-negative integer`},
	} {
		_, stderr, err := c.Kubectl(t.Context(), repoRoot, tc.manifest, "create", "-n", e.ns, "-f", "-")
		require.Error(t, err, tc.name)
		assert.Equal(t, tc.want, strings.TrimSpace(stderr), tc.name)
	}
	for _, tc := range []struct{ name, manifest, want string }{
		{"PaddleJob", "apiVersion: batch.paddlepaddle.org/v1\nkind: PaddleJob\nmetadata: {name: ps-only}\nspec: {ps: {replicas: 1, " + template + "}}\n",
			"spec.worker: Required value"},
		{"MSJob", "apiVersion: mindspore.gitee.com/v1\nkind: MSJob\nmetadata: {name: ps-only}\nspec: {msReplicaSpecs: {PS: {replicas: 1, " + template + "}}}\n",
			"spec.msReplicaSpecs.Worker: Required value"},
	} {
		_, stderr, err := c.Kubectl(t.Context(), repoRoot, tc.manifest, "create", "-n", e.ns, "-f", "-")
		require.Error(t, err, tc.name)
		assert.Contains(t, stderr, tc.want, "%s without a worker", tc.name)
	}
}

// TestReplicasOutsideTheBoundsAreSaid: `kubectl scale` outside an
// autoscaled job's bounds, below its minimum or above its maximum, is
// stored as asked and run within the bounds, and says so in an Event and
// the status, not silently; an ElasticJob's minReplicas..maxReplicas and a
// PaddleJob's requests..limits alike.
func TestReplicasOutsideTheBoundsAreSaid(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"}})
	applyCRDs(t, e.c, e.dyn)
	require.NoError(t, e.createJob(strings.Replace(elasticJobYAML("clamp", 2, ""),
		"replicas: 2", "replicas: 2\n    minReplicas: 2\n    maxReplicas: 4", 1)))
	e.kubectl(fmt.Sprintf(`
apiVersion: batch.paddlepaddle.org/v1
kind: PaddleJob
metadata: {name: pclamp}
spec:
  worker:
    replicas: 2
    requests: 2
    limits: 3
    template: {spec: {containers: [{name: paddle, image: p, command: [%s]}]}}
`, toyTrainer), "apply", "-f", "-")
	e.jobStatus("clamp", "Running at 2", runningAt(2))
	// Its age is the resource's, in `coordinator jobs` too.
	code, stdout, stderr := cli(t, nil, "jobs", "--etcd-endpoints", e.etcd.Endpoint())
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `(?m)^clamp\s.*\s\d+s$`, stdout, "an AGE, not -")

	clamped := func(job, said string, workers int) {
		t.Helper()
		e.jobStatus(job, "saying the clamp", func(s jobv1.ElasticJobStatus) bool { return strings.Contains(s.Problem, said) })
		e.jobStatus(job, fmt.Sprintf("running on at %d, within its bounds", workers), runningAt(workers))
		require.Eventually(t, func() bool {
			return slices.ContainsFunc(e.events(job), func(ev corev1.Event) bool {
				return ev.Reason == "ReplicasClamped" && ev.Type == corev1.EventTypeWarning && ev.Message == said
			})
		}, 30*time.Second, 50*time.Millisecond, "no ReplicasClamped Event saying %q", said)
	}
	e.kubectl("", "scale", "elasticjob/clamp", "--replicas=1")
	clamped("clamp", "spec.worker.replicas 1 is outside 2..4: the job runs 2 workers", 2)
	e.kubectl("", "scale", "elasticjob/clamp", "--replicas=6")
	clamped("clamp", "spec.worker.replicas 6 is outside 2..4: the job runs 4 workers", 4)
	assert.Equal(t, "6", e.kubectl("", "get", "elasticjob/clamp", "-o", "jsonpath={.spec.worker.replicas}"), "stored as asked")

	// A PaddleJob's requests..limits, the same way.
	paddleSays := func(said string, workers int64) bool {
		u, err := e.dyn.Resource(paddleJobs).Namespace(e.ns).Get(t.Context(), "pclamp", metav1.GetOptions{})
		if err != nil {
			return false
		}
		problem, _, _ := unstructured.NestedString(u.Object, "status", "elasticTraining", "problem")
		running, _, _ := unstructured.NestedInt64(u.Object, "status", "worker", "running")
		return strings.Contains(problem, said) && running == workers
	}
	require.Eventually(t, func() bool { return paddleSays("", 2) }, 90*time.Second, 50*time.Millisecond,
		"the PaddleJob never ran its 2 workers\ncoordinator:\n%s", e.bridge.out)
	e.kubectl("", "scale", "paddlejob/pclamp", "--replicas=5")
	const said = "spec.worker.replicas 5 is outside 2..3: the job runs 3 workers"
	require.Eventually(t, func() bool { return paddleSays(said, 3) }, 90*time.Second, 50*time.Millisecond,
		"the PaddleJob never said the clamp running 3 workers\ncoordinator:\n%s", e.bridge.out)
	assert.True(t, hasEvent(e.events("pclamp"), "ReplicasClamped", said))
	assert.Equal(t, "5", e.kubectl("", "get", "paddlejob/pclamp", "-o", "jsonpath={.spec.worker.replicas}"), "stored as asked")
}
