package jobcontroller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/membership"
)

func example(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "kubernetes", "examples", file))
	require.NoError(t, err)
	return fromYAML(t, string(data))
}

func fromYAML(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
	u.SetNamespace("ns")
	u.SetUID("uid-1")
	return u
}

func TestPaddleJobExamplesRead(t *testing.T) {
	j, err := fromPaddleJob(example(t, "paddlejob-wide-and-deep.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "wide-and-deep", j.ID)
	assert.Equal(t, membership.NP{Min: 2, Max: 2}, j.Spec.NP)
	assert.Equal(t, 2, j.Spec.PS)
	assert.Equal(t, membership.CleanPodOnCompletion, j.Spec.CleanPodPolicy)
	assert.Equal(t, 1, j.WithGloo)
	assert.Equal(t, jobv1.IntranetPodIP, j.Intranet)
	assert.Equal(t, "PaddleJob/ns/wide-and-deep/uid-1", j.Spec.Owner)
	require.Len(t, j.Roles, 2)
	assert.Equal(t, membership.RoleWorker, j.Roles[0].Name)

	j, err = fromPaddleJob(example(t, "paddlejob-resnet.yaml"))
	require.NoError(t, err)
	assert.Equal(t, membership.CleanPodNever, j.Spec.CleanPodPolicy)
	assert.Equal(t, 1, j.WithGloo, "paddle-operator's default")
	assert.Len(t, j.Roles, 1)
}

func TestPaddleJobElasticAndRefused(t *testing.T) {
	elastic := func(replicas, requests, limits int) (bounds membership.NP, workers membership.NP) {
		t.Helper()
		u := example(t, "paddlejob-resnet.yaml")
		require.NoError(t, unstructured.SetNestedField(u.Object, int64(replicas), "spec", "worker", "replicas"))
		require.NoError(t, unstructured.SetNestedField(u.Object, int64(requests), "spec", "worker", "requests"))
		require.NoError(t, unstructured.SetNestedField(u.Object, int64(limits), "spec", "worker", "limits"))
		j, err := fromPaddleJob(u)
		require.NoError(t, err)
		return j.Spec.NP, j.Spec.Workers()
	}
	for _, c := range []struct {
		replicas, requests, limits int
		workers                    membership.NP
		why                        string
	}{
		{3, 2, 4, membership.NP{Min: 2, Max: 3}, "replicas the target"},
		{9, 2, 4, membership.NP{Min: 2, Max: 4}, "replicas kept within the limits"},
		{1, 2, 4, membership.NP{Min: 2, Max: 2}, "replicas kept within the requests"},
	} {
		bounds, workers := elastic(c.replicas, c.requests, c.limits)
		assert.Equal(t, membership.NP{Min: 2, Max: 4}, bounds, "requests..limits are the autoscaler's bounds")
		assert.Equal(t, c.workers, workers, c.why)
	}

	for doc, want := range map[string]string{
		"apiVersion: batch.paddlepaddle.org/v1\nkind: PaddleJob\nmetadata: {name: a}\nspec: {ps: {replicas: 1}}":                     "spec.worker: a PaddleJob needs a worker",
		"apiVersion: batch.paddlepaddle.org/v1\nkind: PaddleJob\nmetadata: {name: a}\nspec: {worker: {replicas: 0}}":                 "spec.worker.replicas 0: a PaddleJob needs a worker",
		"apiVersion: batch.paddlepaddle.org/v1\nkind: PaddleJob\nmetadata: {name: a}\nspec: {worker: {replicas: 1}, intranet: Wire}": "spec.intranet",
		"apiVersion: batch.paddlepaddle.org/v1\nkind: PaddleJob\nmetadata: {name: A_b}\nspec: {worker: {replicas: 1}}":               "metadata.name",
	} {
		_, err := fromPaddleJob(fromYAML(t, doc))
		require.Error(t, err, doc)
		assert.Contains(t, err.Error(), want)
	}
}

func TestPaddleJobHeterTrainers(t *testing.T) {
	j, err := fromPaddleJob(fromYAML(t, `
apiVersion: batch.paddlepaddle.org/v1
kind: PaddleJob
metadata: {name: heter}
spec:
  worker: {replicas: 2, template: {spec: {containers: [{name: paddle, image: p}]}}}
  ps: {replicas: 1, template: {spec: {containers: [{name: paddle, image: p}]}}}
  heter: {replicas: 1, template: {spec: {containers: [{name: paddle, image: p}]}}}
`))
	require.NoError(t, err)
	assert.Equal(t, 1, j.Spec.Heter)
	require.Len(t, j.Roles, 3)
	assert.Equal(t, membership.RoleHeter, j.Roles[2].Name)
}

func TestMSJobExampleRead(t *testing.T) {
	u := example(t, "msjob-widedeep-dataparallel.yaml")
	j, err := fromMSJob(u)
	require.NoError(t, err)
	assert.Equal(t, membership.NP{Min: 4, Max: 4}, j.Spec.NP)
	assert.Equal(t, 1, j.Spec.Schedulers)
	assert.Equal(t, membership.SuccessAllWorkers, j.Spec.SuccessPolicy)
	assert.Equal(t, membership.CleanPodNever, j.Spec.CleanPodPolicy, "None keeps the pods")
	assert.Equal(t, membership.FaultToleranceNone, j.Spec.FaultTolerance, "restartPolicy Never: a failure ends the job")
	require.Len(t, j.Roles, 2)
	assert.Equal(t, membership.RoleScheduler, j.Roles[0].Name)
	assert.Equal(t, 2222, j.Roles[0].Port, "ms-operator's default port")

	set := func(value any, fields ...string) *unstructured.Unstructured {
		c := u.DeepCopy()
		require.NoError(t, unstructured.SetNestedField(c.Object, value, fields...))
		return c
	}
	j, err = fromMSJob(set("ExitCode", "spec", "msReplicaSpecs", "Worker", "restartPolicy"))
	require.NoError(t, err)
	assert.Equal(t, []int{130, 137, 138, 143}, j.Spec.RetryableExitCodes)
	assert.Equal(t, membership.FaultToleranceRestart, j.Spec.FaultTolerance)
	j, err = fromMSJob(set("All", "spec", "runPolicy", "cleanPodPolicy"))
	require.NoError(t, err)
	assert.Equal(t, membership.CleanPodAlways, j.Spec.CleanPodPolicy)
	j, err = fromMSJob(set("", "spec", "successPolicy"))
	require.NoError(t, err)
	assert.Equal(t, membership.SuccessRank0, j.Spec.SuccessPolicy, `"": worker 0 decides`)
	ported := set([]any{map[string]any{"name": "mindspore", "image": "ms", "ports": []any{map[string]any{"name": "msjob-port", "containerPort": int64(3333)}}}},
		"spec", "msReplicaSpecs", "Scheduler", "template", "spec", "containers")
	j, err = fromMSJob(ported)
	require.NoError(t, err)
	assert.Equal(t, 3333, j.Roles[0].Port)

	for value, field := range map[string][]string{
		"Sometimes": {"spec", "runPolicy", "cleanPodPolicy"},
		"Rank1":     {"spec", "successPolicy"},
		"Twice":     {"spec", "msReplicaSpecs", "Worker", "restartPolicy"},
	} {
		_, err := fromMSJob(set(value, field...))
		require.Error(t, err, value)
		assert.Contains(t, err.Error(), field[len(field)-1])
	}
}

func TestElasticJobBelowItsMinimumRunsAtItsReplicas(t *testing.T) {
	u := fromYAML(t, `
apiVersion: elastictraining.io/v1
kind: ElasticJob
metadata: {name: a}
spec:
  worker: {replicas: 2, minReplicas: 3, template: {spec: {containers: [{name: t, image: t, command: [x]}]}}}
  scheduler: {replicas: 1, template: {spec: {containers: [{name: t, image: t, command: [x]}]}}}
`)
	j, err := fromElasticJob(u)
	require.NoError(t, err)
	assert.Equal(t, membership.NP{Min: 2, Max: 2}, j.Spec.NP)
	assert.Equal(t, 1, j.Spec.Schedulers)
}

func TestAnElasticJobWithMaxReplicasIsAutoscaledWithinItsBounds(t *testing.T) {
	job := func(replicas int) membership.Spec {
		t.Helper()
		u := fromYAML(t, fmt.Sprintf(`
apiVersion: elastictraining.io/v1
kind: ElasticJob
metadata: {name: a}
spec:
  worker: {replicas: %d, minReplicas: 2, maxReplicas: 6, template: {spec: {containers: [{name: t, image: t, command: [x]}]}}}
`, replicas))
		j, err := fromElasticJob(u)
		require.NoError(t, err)
		require.NoError(t, j.Spec.Validate())
		return j.Spec
	}
	s := job(4)
	assert.Equal(t, membership.NP{Min: 2, Max: 6}, s.NP, "the bounds")
	assert.Equal(t, membership.NP{Min: 2, Max: 4}, s.Workers(), "replicas the target")
	assert.Equal(t, membership.NP{Min: 2, Max: 6}, job(9).Workers(), "scaled past the maximum: kept to it")
	assert.Equal(t, membership.NP{Min: 2, Max: 2}, job(1).Workers(), "scaled below the minimum: kept to it")
}

func TestTheSidecarIsInjected(t *testing.T) {
	j, err := fromPaddleJob(example(t, "paddlejob-wide-and-deep.yaml"))
	require.NoError(t, err)
	sc := Sidecar{Image: "img:v1", EtcdEndpoints: "https://etcd:2379", EtcdSecret: "etcd-client", Prefix: "/p/"}
	image := func(c *corev1.Container) ([]string, error) { return []string{"python", "train.py"}, nil }

	// As paddle-operator: every role of a job with parameter servers is
	// told the level, 0 too (Paddle's launcher's default there is 1); a
	// job without them, nothing.
	for _, tc := range []struct {
		withGloo int
		role     int
		flag     string
	}{{1, 0, "--with-gloo=1"}, {1, 1, "--with-gloo=1"}, {2, 1, "--with-gloo=2"}, {0, 0, "--with-gloo=0"}} {
		j.WithGloo = tc.withGloo
		tmpl, err := inject(j, j.Roles[tc.role], sc, image)
		require.NoError(t, err)
		var got string
		for _, arg := range tmpl.Spec.Containers[0].Command {
			if strings.HasPrefix(arg, "--with-gloo") {
				got = arg
			}
		}
		assert.Equal(t, tc.flag, got, "withGloo %d, role %s", tc.withGloo, j.Roles[tc.role].Name)
	}
	collective, err := fromPaddleJob(example(t, "paddlejob-resnet.yaml"))
	require.NoError(t, err)
	tmpl, err := inject(collective, collective.Roles[0], sc, image)
	require.NoError(t, err)
	assert.False(t, slices.ContainsFunc(tmpl.Spec.Containers[0].Command, func(a string) bool { return strings.HasPrefix(a, "--with-gloo") }),
		"no parameter servers: no gloo store to name")
	assert.Contains(t, tmpl.Spec.Containers[0].Command, "--devices=1", "the resnet example asks for nvidia.com/gpu: 1")
	assert.Contains(t, tmpl.Spec.Containers[0].Command, "--framework=paddle")
	ms, err := fromMSJob(example(t, "msjob-widedeep-dataparallel.yaml"))
	require.NoError(t, err)
	tmpl, err = inject(ms, ms.Roles[0], sc, image)
	require.NoError(t, err)
	assert.Contains(t, tmpl.Spec.Containers[0].Command, "--framework=mindspore")
	j.WithGloo = 1
	j.Roles[0].Template.Spec.RestartPolicy = corev1.RestartPolicyNever // valid in paddle-operator's bare pods
	sts, err := statefulSet(j, j.Roles[0], sc, image)
	require.NoError(t, err)
	assert.Equal(t, "wide-and-deep-worker", sts.Name)
	assert.Equal(t, int32(2), *sts.Spec.Replicas)
	assert.Equal(t, "OnDelete", string(sts.Spec.UpdateStrategy.Type))
	pod := sts.Spec.Template.Spec
	assert.Equal(t, "img:v1", pod.InitContainers[0].Image)
	c := pod.Containers[0]
	assert.Equal(t, []string{"/elastic/coordinator", "sidecar", "--role=worker", "--hold-when-done", "--framework=paddle", "--with-gloo=1", "--", "python", "train.py"}, c.Command)
	assert.Nil(t, c.Args)
	assert.Equal(t, corev1.RestartPolicyAlways, pod.RestartPolicy, "the only policy a StatefulSet takes; the sidecar answers exits")
	env := map[string]string{}
	for _, v := range c.Env {
		env[v.Name] = v.Value
		if v.ValueFrom != nil {
			env[v.Name] = v.ValueFrom.FieldRef.FieldPath
		}
	}
	assert.Equal(t, "wide-and-deep", env["ELASTIC_JOB_ID"])
	assert.Equal(t, "https://etcd:2379", env["ELASTIC_ETCD_ENDPOINTS"])
	assert.Equal(t, "/p/", env["ELASTIC_PREFIX"])
	assert.Equal(t, "/etc/elastic/etcd/tls.crt", env["ELASTIC_ETCD_CERT"])
	assert.Equal(t, "status.podIP", env["POD_IP"])
	assert.Equal(t, "metadata.uid", env["POD_UID"])
	assert.Equal(t, "elastic-etcd-tls", c.VolumeMounts[len(c.VolumeMounts)-1].Name)
	// A restarted container finds its predecessor's state: the sidecar
	// takes its node back at once.
	assert.Equal(t, "/var/run/elastic", env["ELASTIC_STATE_DIR"])
	assert.True(t, slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "elastic-state" && m.MountPath == "/var/run/elastic"
	}))
	assert.True(t, slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "elastic-state" && v.EmptyDir != nil }))

	j.Intranet = jobv1.IntranetHost
	tmpl, err = inject(j, j.Roles[0], sc, image)
	require.NoError(t, err)
	assert.True(t, tmpl.Spec.HostNetwork)
	j.Intranet = jobv1.IntranetService
	tmpl, err = inject(j, j.Roles[0], sc, image)
	require.NoError(t, err)
	assert.Equal(t, "Service", tmpl.Annotations["elastic.intranet"])

	_, err = inject(j, j.Roles[0], sc, func(*corev1.Container) ([]string, error) { return nil, errors.New("registry down") })
	var bad templateError
	require.ErrorAs(t, err, &bad)
	assert.Contains(t, err.Error(), "container paddle has no command, and its image's is unknown (registry down)")
}

func TestAContainerRunsItsImagesCommand(t *testing.T) {
	e := &Entrypoints{known: map[string]imageCommand{"img": {entrypoint: []string{"python"}, cmd: []string{"train.py"}}}}
	tm := &term{Controller: &Controller{cfg: Config{Entrypoints: e}}}
	for _, tc := range []struct {
		c    corev1.Container
		want []string
	}{
		{corev1.Container{Image: "img"}, []string{"python", "train.py"}},
		{corev1.Container{Image: "img", Args: []string{"other.py"}}, []string{"python", "other.py"}},
		{corev1.Container{Image: "img", Command: []string{"bash"}, Args: []string{"-c", "x"}}, []string{"bash", "-c", "x"}},
	} {
		got, err := tm.command(context.Background(), &tc.c)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
	assert.Equal(t, "mirror:5000/paddle/demo:v1", (&Entrypoints{Mirrors: map[string]string{"registry.example.com": "mirror:5000"}}).mirrored("registry.example.com/paddle/demo:v1"))
}

// FuzzJobDecoders feeds every kind's reader arbitrary objects: none may
// panic, and a job read has a valid spec.
func FuzzJobDecoders(f *testing.F) {
	for _, file := range []string{"paddlejob-wide-and-deep.yaml", "paddlejob-resnet.yaml", "msjob-widedeep-dataparallel.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "kubernetes", "examples", file))
		require.NoError(f, err)
		js, err := yaml.YAMLToJSON(data)
		require.NoError(f, err)
		f.Add(js)
	}
	f.Add([]byte(`{"metadata":{"name":"a"},"spec":{"worker":{"replicas":-3,"minReplicas":9}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return
		}
		for _, k := range AllKinds {
			j, err := k.job(u)
			if err == nil {
				require.NoError(t, j.Spec.Validate(), "%s read into an invalid spec", k.Name)
			}
		}
	})
}

// spec.preload, or the annotation on a kind without the field, reaches the
// sidecar as ELASTIC_PRELOAD; a bad module name is refused.
func TestPreloadReachesTheSidecar(t *testing.T) {
	preloadOf := func(j Job) string {
		t.Helper()
		tmpl, err := inject(j, j.Roles[0], Sidecar{Image: "img"}, func(*corev1.Container) ([]string, error) { return []string{"python3", "t.py"}, nil })
		require.NoError(t, err)
		for _, v := range tmpl.Spec.Containers[0].Env {
			if v.Name == "ELASTIC_PRELOAD" {
				return v.Value
			}
		}
		return ""
	}
	elastic := func(preload string) (Job, error) {
		return fromElasticJob(fromYAML(t, `
apiVersion: elastictraining.io/v1
kind: ElasticJob
metadata: {name: a}
spec:
  preload: `+preload+`
  worker: {replicas: 2, template: {spec: {containers: [{name: t, image: t, command: [x]}]}}}
`))
	}
	j, err := elastic("[torch, numpy.linalg]")
	require.NoError(t, err)
	assert.Equal(t, "torch,numpy.linalg", preloadOf(j))
	j, err = elastic("[]")
	require.NoError(t, err)
	assert.Empty(t, preloadOf(j), "without preload, no variable")
	_, err = elastic("[torch, a-b]")
	require.ErrorContains(t, err, `spec.preload: "a-b" is not a Python module name`)

	u := example(t, "paddlejob-resnet.yaml")
	u.SetAnnotations(map[string]string{jobv1.AnnotationPreload: "paddle, numpy"})
	j, err = fromPaddleJob(u)
	require.NoError(t, err)
	assert.Equal(t, "paddle,numpy", preloadOf(j))
	u.SetAnnotations(map[string]string{jobv1.AnnotationPreload: "paddle;rm"})
	_, err = fromPaddleJob(u)
	require.ErrorContains(t, err, `metadata.annotations[elastic.preload]: "paddle;rm" is not a Python module name`)
}

// TestMSJobConditionsMoveWithTheJob: Created stays true; Running and
// Restarting turn each other false; the one set last is last (the State
// column); Restarting names the current generation, not the first.
func TestMSJobConditionsMoveWithTheJob(t *testing.T) {
	var status map[string]any
	step := func(phase string, gen int64, msg string) []map[string]any {
		t.Helper()
		var err error
		status, err = msJobStatus(jobv1.ElasticJobStatus{Phase: phase, Generation: gen, Message: msg}, nil, status)
		require.NoError(t, err)
		var out []map[string]any
		for _, c := range status["conditions"].([]any) {
			out = append(out, c.(map[string]any))
		}
		return out
	}
	summary := func(conds []map[string]any) []string {
		var s []string
		for _, c := range conds {
			s = append(s, fmt.Sprintf("%s=%s", c["type"], c["status"]))
		}
		return s
	}
	assert.Equal(t, []string{"Created=True"}, summary(step(jobv1.PhaseWaiting, 0, "waiting for 4 workers")))
	assert.Equal(t, []string{"Created=True", "Running=True"}, summary(step(jobv1.PhaseRunning, 1, "all running")))
	conds := step(jobv1.PhaseRestarting, 2, "member w-2 lost")
	assert.Equal(t, []string{"Created=True", "Running=False", "Restarting=True"}, summary(conds))
	assert.Equal(t, "generation 2: member w-2 lost", conds[2]["message"])
	assert.Equal(t, []string{"Created=True", "Restarting=False", "Running=True"}, summary(step(jobv1.PhaseRunning, 2, "all running")))
	conds = step(jobv1.PhaseRestarting, 6, "node w-0 failed with exit code 1")
	assert.Equal(t, []string{"Created=True", "Running=False", "Restarting=True"}, summary(conds))
	assert.Equal(t, "generation 6: node w-0 failed with exit code 1", conds[2]["message"], "the current generation, not the first")
	conds = step(jobv1.PhaseSucceeded, 7, "rank 0 succeeded")
	assert.Equal(t, []string{"Created=True", "Running=False", "Restarting=False", "Succeeded=True"}, summary(conds))
	for _, c := range conds {
		assert.NotEmpty(t, c["lastTransitionTime"], "%s has a lastTransitionTime", c["type"])
	}
}

// TestHangWatchFromFieldsAndAnnotations: an ElasticJob's fields and a
// PaddleJob's or MSJob's annotations set the spec's hang watch; a bad
// value is one line naming the field.
func TestHangWatchFromFieldsAndAnnotations(t *testing.T) {
	elastic := func(fields string) (Job, error) {
		return fromElasticJob(fromYAML(t, `
apiVersion: elastictraining.io/v1
kind: ElasticJob
metadata: {name: a}
spec:
  `+fields+`
  worker: {replicas: 2, template: {spec: {containers: [{name: t, image: t, command: [x]}]}}}
`))
	}
	j, err := elastic("hangTimeout: 1500ms\n  startupTimeout: \"0\"\n  maxHangRestarts: 4")
	require.NoError(t, err)
	require.NotNil(t, j.Spec.HangTimeout)
	assert.Equal(t, membership.Duration(1500*time.Millisecond), *j.Spec.HangTimeout)
	require.NotNil(t, j.Spec.StartupTimeout)
	assert.Zero(t, *j.Spec.StartupTimeout, "0: no start-up limit")
	assert.Equal(t, 4, j.Spec.MaxHangRestarts)
	j, err = elastic("hangTimeout: auto")
	require.NoError(t, err)
	assert.Nil(t, j.Spec.HangTimeout, "auto: learned")
	assert.Equal(t, membership.DefaultMaxHangRestarts, j.Spec.MaxHangRestarts)
	_, err = elastic("hangTimeout: -2s")
	require.ErrorContains(t, err, "spec.hangTimeout -2s: must not be negative")
	_, err = elastic("hangTimeout: 1ms")
	require.ErrorContains(t, err, "spec.hangTimeout 1ms: want 500ms or more, the least the hang watch honours")

	u := example(t, "paddlejob-resnet.yaml")
	u.SetAnnotations(map[string]string{jobv1.AnnotationHangTimeout: "20s", jobv1.AnnotationMaxHangRestarts: "2"})
	j, err = fromPaddleJob(u)
	require.NoError(t, err)
	assert.Equal(t, membership.Duration(20*time.Second), *j.Spec.HangTimeout)
	assert.Equal(t, 2, j.Spec.MaxHangRestarts)
	u.SetAnnotations(map[string]string{jobv1.AnnotationStartupTimeout: "soon"})
	_, err = fromPaddleJob(u)
	require.ErrorContains(t, err, `metadata.annotations[elastic.startup-timeout] "soon": want a duration`)
	u.SetAnnotations(map[string]string{jobv1.AnnotationHangTimeout: "10ms"})
	_, err = fromPaddleJob(u)
	require.ErrorContains(t, err, `metadata.annotations[elastic.hang-timeout] 10ms: want 500ms or more`)
}

func TestSparesFromTheWorkerRoleAndAnnotations(t *testing.T) {
	elastic := func(worker string) (Job, error) {
		return fromElasticJob(fromYAML(t, `
apiVersion: elastictraining.io/v1
kind: ElasticJob
metadata: {name: a}
spec:
  worker: {`+worker+`template: {spec: {containers: [{name: t, image: t, command: [x]}]}}}
  ps: {replicas: 1, template: {spec: {containers: [{name: t, image: t, command: [x]}]}}}
`))
	}
	j, err := elastic("replicas: 2, spares: 1, ")
	require.NoError(t, err)
	assert.Equal(t, 1, j.Spec.Spares)
	assert.Equal(t, membership.NP{Min: 2, Max: 2}, j.Spec.NP, "spares are not in np")
	assert.Equal(t, 3, j.Roles[0].Replicas, "the workers' StatefulSet holds the spares too")
	assert.Equal(t, 1, j.Roles[1].Replicas, "other roles have none")
	_, err = elastic("replicas: 2, spares: 3, ")
	require.ErrorContains(t, err, "spares 3: at most the workers' maximum, 2")

	_, err = fromElasticJob(fromYAML(t, `
apiVersion: elastictraining.io/v1
kind: ElasticJob
metadata: {name: a}
spec:
  worker: {replicas: 2, template: {spec: {containers: [{name: t, image: t, command: [x]}]}}}
  ps: {replicas: 1, spares: 1, template: {spec: {containers: [{name: t, image: t, command: [x]}]}}}
`))
	require.ErrorContains(t, err, "spec.ps.spares: only workers have spares")

	u := example(t, "paddlejob-resnet.yaml")
	u.SetAnnotations(map[string]string{jobv1.AnnotationSpares: "1"})
	j, err = fromPaddleJob(u)
	require.NoError(t, err)
	assert.Equal(t, 1, j.Spec.Spares)
	assert.Equal(t, j.Spec.Workers().Max+1, j.Roles[0].Replicas)
	u.SetAnnotations(map[string]string{jobv1.AnnotationSpares: "-1"})
	_, err = fromPaddleJob(u)
	require.ErrorContains(t, err, `metadata.annotations[elastic.spares] "-1": want a number of spare workers, 0 or more`)

	m := example(t, "msjob-widedeep-dataparallel.yaml")
	m.SetAnnotations(map[string]string{jobv1.AnnotationSpares: "1"})
	j, err = fromMSJob(m)
	require.NoError(t, err)
	assert.Equal(t, 1, j.Spec.Spares)
}

// Each kind says suspend its own way: an ElasticJob's spec.suspend, an
// MSJob's spec.runPolicy.suspend, the annotation elastic.suspend on any
// (a PaddleJob has no field). A suspended job's StatefulSets are made at 0.
func TestEachKindIsSuspendedItsOwnWay(t *testing.T) {
	ej := fromYAML(t, `
apiVersion: elastictraining.io/v1
kind: ElasticJob
metadata: {name: ej}
spec:
  suspend: true
  worker:
    replicas: 2
    template: {spec: {containers: [{name: trainer, image: t, command: [train]}]}}
`)
	j, err := fromElasticJob(ej)
	require.NoError(t, err)
	assert.True(t, j.Spec.Suspend)
	set, err := statefulSet(j, j.Roles[0], Sidecar{Image: "sidecar", EtcdEndpoints: "http://etcd:2379"},
		func(c *corev1.Container) ([]string, error) { return c.Command, nil })
	require.NoError(t, err)
	assert.Equal(t, int32(0), *set.Spec.Replicas, "a suspended job has no pods")

	ms := example(t, "msjob-widedeep-dataparallel.yaml")
	j, err = fromMSJob(ms)
	require.NoError(t, err)
	assert.False(t, j.Spec.Suspend)
	require.NoError(t, unstructured.SetNestedField(ms.Object, true, "spec", "runPolicy", "suspend"))
	j, err = fromMSJob(ms)
	require.NoError(t, err)
	assert.True(t, j.Spec.Suspend)

	pj := example(t, "paddlejob-resnet.yaml")
	pj.SetAnnotations(map[string]string{jobv1.AnnotationSuspend: "true"})
	j, err = fromPaddleJob(pj)
	require.NoError(t, err)
	assert.True(t, j.Spec.Suspend)
	pj.SetAnnotations(map[string]string{jobv1.AnnotationSuspend: "later"})
	_, err = fromPaddleJob(pj)
	require.EqualError(t, err, `metadata.annotations[elastic.suspend] "later": want true or false`)
}

// spec.inPlace, or the annotation on a kind without the field, reaches
// the sidecar as ELASTIC_IN_PLACE=1; a value that is no boolean is refused.
func TestInPlaceReachesTheSidecar(t *testing.T) {
	inPlaceOf := func(j Job) string {
		t.Helper()
		tmpl, err := inject(j, j.Roles[0], Sidecar{Image: "img"}, func(*corev1.Container) ([]string, error) { return []string{"python3", "t.py"}, nil })
		require.NoError(t, err)
		for _, v := range tmpl.Spec.Containers[0].Env {
			if v.Name == "ELASTIC_IN_PLACE" {
				return v.Value
			}
		}
		return ""
	}
	elastic := func(inPlace string) (Job, error) {
		return fromElasticJob(fromYAML(t, `
apiVersion: elastictraining.io/v1
kind: ElasticJob
metadata: {name: a}
spec:
  inPlace: `+inPlace+`
  worker: {replicas: 2, spares: 1, template: {spec: {containers: [{name: t, image: t, command: [x]}]}}}
`))
	}
	j, err := elastic("true")
	require.NoError(t, err)
	assert.Equal(t, "1", inPlaceOf(j))
	j, err = elastic("false")
	require.NoError(t, err)
	assert.Empty(t, inPlaceOf(j), "not in place, no variable")

	u := example(t, "paddlejob-resnet.yaml")
	u.SetAnnotations(map[string]string{jobv1.AnnotationInPlace: "true"})
	j, err = fromPaddleJob(u)
	require.NoError(t, err)
	assert.Equal(t, "1", inPlaceOf(j))
	u.SetAnnotations(map[string]string{jobv1.AnnotationInPlace: "yes please"})
	_, err = fromPaddleJob(u)
	require.ErrorContains(t, err, `metadata.annotations[elastic.in-place] "yes please": want true or false`)
}
