package integration

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
)

var (
	paddleJobs = schema.GroupVersionResource{Group: "batch.paddlepaddle.org", Version: "v1", Resource: "paddlejobs"}
	msJobs     = schema.GroupVersionResource{Group: "mindspore.gitee.com", Version: "v1", Resource: "msjobs"}
)

// demoRegistry serves, as registry.baidubce.com would, the image of the
// wide-and-deep example, whose PaddleJob gives no command: the controller
// reads the image's to wrap it. It returns the registry's host.
func demoRegistry(t *testing.T) string {
	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	pushDemoImage(t, host)
	return host
}

// pushDemoImage writes the wide-and-deep example's image to the registry
// at host.
func pushDemoImage(t *testing.T, host string) {
	img, err := mutate.Config(empty.Image, v1.Config{Entrypoint: []string{"python"}, Cmd: []string{"train.py"}})
	require.NoError(t, err)
	ref, err := name.ParseReference(host + "/paddle-operator/demo-wide-and-deep:v1")
	require.NoError(t, err)
	require.NoError(t, remote.Write(ref, img))
}

// TestAJobWaitsForItsImagesRegistry applies a PaddleJob whose command is
// its image's while the image's registry is down: the job says so, and
// runs once the registry is back, with nobody touching it.
func TestAJobWaitsForItsImagesRegistry(t *testing.T) {
	t.Parallel()
	host := "127.0.0.1:" + freePort(t)
	e := newKubeEnv(t, kubeOptions{injected: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"},
		bridgeArgs: []string{"--registry-mirror", "registry.baidubce.com=" + host}})
	applyCRDs(t, e.c, e.dyn)
	e.kubectl("", "apply", "-f", filepath.Join("testdata", "kubernetes", "examples", "paddlejob-wide-and-deep.yaml"))
	field := func(path ...string) string {
		u, err := e.dyn.Resource(paddleJobs).Namespace(e.ns).Get(t.Context(), "wide-and-deep", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		v, _, _ := unstructured.NestedString(u.Object, path...)
		return v
	}
	require.Eventually(t, func() bool {
		return strings.Contains(field("status", "elasticTraining", "problem"), "cannot be read yet")
	},
		60*time.Second, 50*time.Millisecond, "the job never said it waits for its image: %q", field("status", "elasticTraining", "problem"))

	l, err := net.Listen("tcp", host)
	require.NoError(t, err)
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: registry.New()}}
	srv.Start()
	t.Cleanup(srv.Close)
	pushDemoImage(t, host)
	back := time.Now()
	require.Eventually(t, func() bool { return field("status", "phase") == "Running" }, 90*time.Second, 50*time.Millisecond,
		"the job never ran after its registry came back (%q, %q)\ncoordinator:\n%s", field("status", "phase"), field("status", "elasticTraining", "problem"), e.bridge.out)
	t.Logf("running %s after the registry came back", time.Since(back).Round(time.Millisecond))
	assert.Empty(t, field("status", "elasticTraining", "problem"))
}

// podEnv reads the environment a pod's trainer was started with in a
// generation, as the stand-in trainer wrote it down.
func (e *kubeEnv) podEnv(job, pod string) map[string]string {
	e.t.Helper()
	// The trainer writes it a moment after its sidecar says it runs.
	var files []string
	require.Eventually(e.t, func() bool {
		files, _ = filepath.Glob(filepath.Join(e.toyDir, job, "env-"+pod+"-*"))
		return len(files) > 0
	}, 30*time.Second, 20*time.Millisecond, "pod %s never started a trainer", pod)
	env, err := readEnvFile(files[len(files)-1])
	require.NoError(e.t, err)
	return env
}

// readEnvFile reads a file of NAME=value lines, as env(1) writes them.
func readEnvFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

// podEnvAt is the environment a pod's trainer was started with in the
// first generation from gen on that it wrote down.
func (e *kubeEnv) podEnvAt(job, pod string, gen int) map[string]string {
	e.t.Helper()
	var file string
	require.Eventually(e.t, func() bool {
		files, _ := filepath.Glob(filepath.Join(e.toyDir, job, "env-"+pod+"-*"))
		best := 0
		for _, f := range files {
			if g, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(f), "env-"+pod+"-")); err == nil && g >= gen && (best == 0 || g < best) {
				best, file = g, f
			}
		}
		return best > 0
	}, 60*time.Second, 20*time.Millisecond, "pod %s never started a trainer of generation %d or later", pod, gen)
	env, err := readEnvFile(file)
	require.NoError(e.t, err)
	return env
}

// scaleStatus is what a job's scale subresource says of its replicas, as
// an HPA reads it; -1 if it cannot be read.
func (e *kubeEnv) scaleStatus(gvr schema.GroupVersionResource, job string) int64 {
	u, err := e.dyn.Resource(gvr).Namespace(e.ns).Get(e.t.Context(), job, metav1.GetOptions{}, "scale")
	if err != nil {
		return -1
	}
	n, _, _ := unstructured.NestedInt64(u.Object, "status", "replicas")
	return n
}

func podIP(t *testing.T, c *kubetest.Cluster, ns, pod string) string {
	p, err := c.Client.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
	require.NoError(t, err)
	return p.Status.PodIP
}

// TestTheSeedsPaddleJobsAndMSJobRunUnchanged applies the PaddleJob and
// MSJob examples of the documents the product was specified from, as they
// are, with `kubectl apply -f`, and expects each to reach Running with the
// environment its framework reads.
func TestTheSeedsPaddleJobsAndMSJobRunUnchanged(t *testing.T) {
	t.Parallel()
	mirror := demoRegistry(t)
	e := newKubeEnv(t, kubeOptions{injected: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"},
		bridgeArgs: []string{"--registry-mirror", "registry.baidubce.com=" + mirror}})
	applyCRDs(t, e.c, e.dyn)
	for _, f := range []string{"paddlejob-wide-and-deep.yaml", "paddlejob-resnet.yaml", "msjob-widedeep-dataparallel.yaml"} {
		e.kubectl("", "apply", "-f", filepath.Join("testdata", "kubernetes", "examples", f))
	}

	// PaddleJob, parameter servers: the image's command wrapped; every
	// role gets gloo, its store at the first server (as paddle-operator
	// does), and the workers the servers' endpoints.
	paddlePhase := func(job string) string {
		u, err := e.dyn.Resource(paddleJobs).Namespace(e.ns).Get(t.Context(), job, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		return phase
	}
	for _, job := range []string{"wide-and-deep", "resnet"} {
		require.Eventually(t, func() bool { return paddlePhase(job) == "Running" }, 90*time.Second, 50*time.Millisecond,
			"PaddleJob %s never Running (%q)\ncoordinator:\n%s", job, paddlePhase(job), e.bridge.out)
	}
	sts, err := e.c.Client.AppsV1().StatefulSets(e.ns).Get(t.Context(), "wide-and-deep-worker", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"/elastic/coordinator", "sidecar", "--role=worker", "--hold-when-done", "--framework=paddle", "--with-gloo=1", "--", "python", "train.py"},
		sts.Spec.Template.Spec.Containers[0].Command, "the image's entrypoint and command, wrapped")
	worker := e.podEnv("wide-and-deep", "wide-and-deep-worker-0")
	assert.Equal(t, "TRAINER", worker["TRAINING_ROLE"])
	assert.Equal(t, "TRAINER", worker["PADDLE_ROLE"], "ps.py gives PADDLE_ROLE too")
	assert.NotContains(t, worker, "RANK", "a PaddleJob gets Paddle's variables alone")
	assert.Equal(t, "2", worker["PADDLE_TRAINERS_NUM"])
	assert.Len(t, strings.Split(worker["PADDLE_PSERVERS_IP_PORT_LIST"], ","), 2)
	assert.Contains(t, worker["PADDLE_PSERVERS_IP_PORT_LIST"], podIP(t, e.c, e.ns, "wide-and-deep-ps-0")+":")
	assert.Equal(t, "1", worker["PADDLE_WITH_GLOO"])
	assert.Equal(t, "3", worker["PADDLE_GLOO_RENDEZVOUS"])
	store := worker["PADDLE_GLOO_HTTP_ENDPOINT"]
	assert.NotContains(t, worker["PADDLE_PSERVERS_IP_PORT_LIST"], store, "on a port of its own")
	var first string
	for _, pod := range []string{"wide-and-deep-ps-0", "wide-and-deep-ps-1"} {
		ps := e.podEnv("wide-and-deep", pod)
		assert.Equal(t, "PSERVER", ps["TRAINING_ROLE"])
		assert.Equal(t, "1", ps["PADDLE_WITH_GLOO"], "the first server starts the store only if told to use gloo")
		assert.Equal(t, store, ps["PADDLE_GLOO_HTTP_ENDPOINT"])
		if ps["PADDLE_PSERVER_ID"] == "0" {
			first = ps["POD_IP"]
		}
	}
	assert.True(t, strings.HasPrefix(store, first+":"), "the store is the first server's (PADDLE_PSERVER_ID 0, at %s): %s", first, store)
	// Collective, `python -m paddle.distributed.launch train_fleet.py`:
	// the launcher (its stand-in) runs once per pod inside the
	// generation, and gives its process the generation's ranks.
	resnet := e.podEnv("resnet", "resnet-worker-1")
	assert.Equal(t, "2", resnet["PADDLE_TRAINERS_NUM"])
	assert.Equal(t, "1", resnet["PADDLE_TRAINER_ID"])
	assert.Len(t, strings.Split(resnet["PADDLE_TRAINER_ENDPOINTS"], ","), 2)
	assert.Equal(t, "1", resnet["PADDLE_RANK"], "the launcher was told its node's rank")
	assert.Equal(t, "2", resnet["PADDLE_NNODES"])
	rsts, err := e.c.Client.AppsV1().StatefulSets(e.ns).Get(t.Context(), "resnet-worker", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"/elastic/coordinator", "sidecar", "--role=worker", "--hold-when-done", "--framework=paddle", "--devices=1",
		"--", "python", "-m", "paddle.distributed.launch", "train_fleet.py"},
		rsts.Spec.Template.Spec.Containers[0].Command, "collective: paddle-operator sets no gloo variables; one GPU asked for")
	assert.Empty(t, resnet["PADDLE_WITH_GLOO"])

	// MSJob: a scheduler, four workers; MindSpore's variables point at the
	// scheduler's pod.
	require.Eventually(t, func() bool {
		u, err := e.dyn.Resource(msJobs).Namespace(e.ns).Get(t.Context(), "ms-widedeep-dataparallel", metav1.GetOptions{})
		if err != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Running" && m["status"] == "True" {
				return true
			}
		}
		return false
	}, 90*time.Second, 50*time.Millisecond, "MSJob never Running\ncoordinator:\n%s", e.bridge.out)
	// Worker counts are the workers' alone, not the servers' or the
	// scheduler's too: in kubectl get's WORKER column, and in the scale
	// subresource an HPA reads.
	require.Eventually(t, func() bool {
		return e.scaleStatus(paddleJobs, "wide-and-deep") == 2 && e.scaleStatus(msJobs, "ms-widedeep-dataparallel") == 4
	}, 30*time.Second, 50*time.Millisecond, "the scale subresources never reported the workers: %d and %d",
		e.scaleStatus(paddleJobs, "wide-and-deep"), e.scaleStatus(msJobs, "ms-widedeep-dataparallel"))
	wd, err := e.dyn.Resource(paddleJobs).Namespace(e.ns).Get(t.Context(), "wide-and-deep", metav1.GetOptions{})
	require.NoError(t, err)
	ready, _, _ := unstructured.NestedString(wd.Object, "status", "worker", "ready")
	assert.Equal(t, "2/2", ready, "two workers of two; the servers are not workers")

	sched := podIP(t, e.c, e.ns, "ms-widedeep-dataparallel-scheduler-0")
	msWorkers := func(gen int) {
		t.Helper()
		ids := map[string]bool{}
		for i := range 4 {
			env := e.podEnvAt("ms-widedeep-dataparallel", fmt.Sprintf("ms-widedeep-dataparallel-worker-%d", i), gen)
			assert.Equal(t, "MS_WORKER", env["MS_ROLE"])
			assert.Equal(t, sched, env["MS_SCHED_HOST"], "MS_SCHED_HOST is the scheduler pod")
			assert.Equal(t, "2222", env["MS_SCHED_PORT"], "ms-operator's default port")
			assert.Equal(t, "4", env["MS_WORKER_NUM"])
			assert.Equal(t, "0", env["MS_SERVER_NUM"])
			assert.Equal(t, env["RANK_ID"], env["MS_NODE_ID"], "MindSpore's rank is the job's")
			assert.Equal(t, "4", env["RANK_SIZE"])
			assert.Equal(t, "0", env["DEVICE_ID"])
			assert.NotContains(t, env, "RANK", "msrun gives no RANK")
			ids[env["MS_NODE_ID"]] = true
		}
		assert.Equal(t, map[string]bool{"0": true, "1": true, "2": true, "3": true}, ids, "numeric node ids, one a rank")
	}
	msWorkers(1)
	schedEnv := e.podEnv("ms-widedeep-dataparallel", "ms-widedeep-dataparallel-scheduler-0")
	assert.Equal(t, "MS_SCHED", schedEnv["MS_ROLE"])
	assert.NotContains(t, schedEnv, "MS_NODE_ID")
	assert.Equal(t, 5, kubetest.RunningPods(t.Context(), e.c.Client, e.ns, "elastic.job=ms-widedeep-dataparallel"))

	// Generation 2, after a worker pod's loss: the same contract.
	e.kubectl("", "delete", "pod", "ms-widedeep-dataparallel-worker-2", "--wait=false")
	msWorkers(2)
	// And after a scale: resnet at 3 workers.
	e.kubectl("", "scale", "paddlejob/resnet", "--replicas=3")
	for i := range 3 {
		env := e.podEnvAt("resnet", fmt.Sprintf("resnet-worker-%d", i), 2)
		assert.Equal(t, "3", env["PADDLE_TRAINERS_NUM"])
		assert.Equal(t, strconv.Itoa(i), env["PADDLE_TRAINER_ID"])
		assert.Equal(t, "3", env["PADDLE_NNODES"])
	}

}

// TestAKindTheRoleDeniesStopsNoOther takes the ElasticJob rules out of
// the coordinator's Role: a PaddleJob still runs, and the denial is logged.
func TestAKindTheRoleDeniesStopsNoOther(t *testing.T) {
	t.Parallel()
	rules := rbacRules(t)
	start := strings.Index(rules, "  - apiGroups: [\"elastictraining.io\"]")
	end := strings.Index(rules, "  - apiGroups: [\"batch.paddlepaddle.org\"]")
	require.True(t, start > 0 && end > start, "deploy/rbac.yaml changed its layout")
	e := newKubeEnv(t, kubeOptions{injected: true, role: rules[:start] + rules[end:], toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"}})
	applyCRDs(t, e.c, e.dyn)
	e.apply(mustRead(t, filepath.Join(repoRoot, "testdata", "kubernetes", "examples", "paddlejob-resnet.yaml")), e.ns)
	require.Eventually(t, func() bool {
		u, err := e.dyn.Resource(paddleJobs).Namespace(e.ns).Get(t.Context(), "resnet", metav1.GetOptions{})
		if err != nil {
			return false
		}
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		return phase == "Running"
	}, 90*time.Second, 50*time.Millisecond, "the PaddleJob never ran\ncoordinator:\n%s", e.bridge.out)
	assert.Contains(t, e.bridge.out.String(), "kubernetes watch failed; jobs of other kinds go on")
	assert.Contains(t, e.bridge.out.String(), "elasticjobs.elastictraining.io is forbidden")
}
