package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
)

// elasticJobRows are the timings of ElasticJobs: from the create (what
// `kubectl apply` does) to every trainer running, and from a change of the
// scale subresource (`kubectl scale`) to every trainer running at the new
// size, and from a graceful delete of one pod (`kubectl delete pod`) to
// every trainer running again, the pod's replacement's included. A trainer
// is running when its process has started: it writes the time down first
// thing.
type elasticJobRows struct {
	apply, down, up, podDelete []time.Duration
}

// measureElasticJobs runs the real controller (`coordinator serve
// --kubernetes`) and, for every pod, the command it injected, as the
// kubelet would run it.
func measureElasticJobs(ctx context.Context, c *kubetest.Cluster, binary, dir string, workers, runs int) (elasticJobRows, error) {
	var out elasticJobRows
	ns := "bench-elasticjob"
	starts := filepath.Join(dir, "starts")
	dyn, done, err := startServe(ctx, c, binary, dir, ns, nil, func(pod *corev1.Pod) (kubetest.Container, error) {
		return runInjected(binary, pod, starts)
	})
	if err != nil {
		return out, err
	}
	defer done()

	jobs := dyn.Resource(jobv1.GroupVersionResource).Namespace(ns)
	for i := range runs {
		name := fmt.Sprintf("bench-%d", i)
		jobDir := filepath.Join(starts, name)
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion(jobv1.Group + "/" + jobv1.Version)
		obj.SetKind(jobv1.Kind)
		obj.SetName(name)
		obj.Object["spec"] = map[string]any{"worker": map[string]any{
			"replicas": int64(workers),
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
				"name": "trainer", "image": "trainer", "command": []any{"/bin/sleep", "100000"},
			}}}},
		}}
		t0 := time.Now()
		if _, err := jobs.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return out, err
		}
		at, gen, err := allStarted(ctx, jobDir, workers, 0)
		if err != nil {
			return out, fmt.Errorf("apply: %w", err)
		}
		out.apply = append(out.apply, at.Sub(t0))
		if err := settled(ctx, c, ns, name, workers); err != nil {
			return out, err
		}

		for _, n := range []int{workers / 2, workers} {
			t0 := time.Now()
			if err := scale(ctx, jobs, name, n); err != nil {
				return out, err
			}
			at, next, err := allStarted(ctx, jobDir, n, gen)
			if err != nil {
				return out, fmt.Errorf("scale to %d: %w", n, err)
			}
			gen = next
			if err := settled(ctx, c, ns, name, n); err != nil {
				return out, err
			}
			if n < workers {
				out.down = append(out.down, at.Sub(t0))
			} else {
				out.up = append(out.up, at.Sub(t0))
			}
		}
		t0 = time.Now()
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, name+"-worker-1", metav1.DeleteOptions{}); err != nil {
			return out, err
		}
		at, _, err = allStarted(ctx, jobDir, workers, gen)
		if err != nil {
			return out, fmt.Errorf("pod delete: %w", err)
		}
		out.podDelete = append(out.podDelete, at.Sub(t0))
		if err := settled(ctx, c, ns, name, workers); err != nil {
			return out, err
		}
		if err := jobs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return out, err
		}
		if err := gone(ctx, c, ns, name); err != nil {
			return out, err
		}
	}
	return out, nil
}

// startServe runs, in a new namespace ns, the real controller (`coordinator
// serve --kubernetes`, with flags) on an etcd of its own, and for every pod
// the runner run, as the kubelet would run it. done stops them all.
func startServe(ctx context.Context, c *kubetest.Cluster, binary, dir, ns string, flags []string,
	run func(*corev1.Pod) (kubetest.Container, error)) (dyn dynamic.Interface, done func(), err error) {
	var stops []func()
	done = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			done()
		}
	}()
	if dyn, err = dynamic.NewForConfig(c.Config); err != nil {
		return nil, nil, err
	}
	if err := kubetest.ApplyElasticJobCRD(ctx, dyn); err != nil {
		return nil, nil, err
	}
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{DataDir: filepath.Join(dir, "etcd"), LogFile: filepath.Join(dir, "etcd.log")})
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { etcd.Close() })
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, nil, err
	}
	serve := exec.Command(binary, append([]string{"serve", "--etcd-endpoints", etcd.ClientURL(), "--listen-metrics", "127.0.0.1:0",
		"--kubernetes", "--kubeconfig", c.Kubeconfig, "--namespace", ns, "--log-level", logLevel(), "--sidecar-image", "bench"}, flags...)...)
	serve.Stdout, serve.Stderr = os.Stderr, os.Stderr
	if err := serve.Start(); err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { stop(serve) })
	runner, err := kubetest.StartPodRunner(c.Client, ns, jobv1.LabelJob, run, func(err error) { fmt.Fprintln(os.Stderr, err) })
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, runner.Stop)
	return dyn, done, nil
}

// runInjected runs the command the controller injected into the pod's
// training container, with this binary for the one the init container
// copies, and the trainer replaced by one that writes down when it started.
func runInjected(binary string, pod *corev1.Pod, starts string) (kubetest.Container, error) {
	c := pod.Spec.Containers[0]
	args := append(slices.Clone(c.Command[1:]), c.Args...)
	dash := slices.Index(args, "--")
	if c.Command[0] != "/elastic/coordinator" || dash < 0 {
		return nil, fmt.Errorf("pod %s: the sidecar was not injected", pod.Name)
	}
	dir := filepath.Join(starts, pod.Labels[jobv1.LabelJob])
	args = append(args[:dash+1], "/bin/sh", "-c",
		`date +%s.%N >"$0/g$ELASTIC_GENERATION-w$WORLD_SIZE-$POD_NAME.tmp" && mv "$0/g$ELASTIC_GENERATION-w$WORLD_SIZE-$POD_NAME.tmp" "$0/g$ELASTIC_GENERATION-w$WORLD_SIZE-$POD_NAME" && exec sleep 100000`, dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return startInjected(binary, pod, args)
}

// startInjected runs an injected sidecar command, args, as the kubelet
// would in the pod, with this binary for the one the init container
// copies, and env added.
func startInjected(binary string, pod *corev1.Pod, args []string, env ...string) (kubetest.Container, error) {
	c := pod.Spec.Containers[0]
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	for _, v := range c.Env {
		val := v.Value
		if v.ValueFrom != nil && v.ValueFrom.FieldRef != nil {
			switch v.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				val = pod.Name
			case "metadata.namespace":
				val = pod.Namespace
			case "metadata.uid":
				val = string(pod.UID)
			case "status.podIP":
				val = pod.Status.PodIP
			}
		}
		cmd.Env = append(cmd.Env, v.Name+"="+val)
	}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if os.Getenv("BENCH_DEBUG") != "" {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait() }()
	return process{cmd}, nil
}

// allStarted waits for n trainers of world size n, of a generation after
// gen, to have started, and returns when the last one did and its
// generation.
func allStarted(ctx context.Context, dir string, n int, after int64) (time.Time, int64, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		byGen := map[int64][]time.Time{}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			var gen int64
			var world int
			if _, err := fmt.Sscanf(e.Name(), "g%d-w%d-", &gen, &world); err != nil || world != n || gen <= after || strings.HasSuffix(e.Name(), ".tmp") {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			sec, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
			if err != nil {
				continue
			}
			byGen[gen] = append(byGen[gen], time.Unix(0, int64(sec*1e9)))
		}
		for gen, times := range byGen {
			if len(times) == n {
				return slices.MaxFunc(times, func(a, b time.Time) int { return a.Compare(b) }), gen, nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Time{}, 0, fmt.Errorf("%d trainers of world size %d never started", n, n)
}

// scale changes the workers through the scale subresource, as `kubectl
// scale` does: a merge patch.
func scale(ctx context.Context, jobs dynamic.ResourceInterface, name string, n int) error {
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
	_, err := jobs.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "scale")
	return err
}

// gone waits for a deleted job's pods to be gone.
func gone(ctx context.Context, c *kubetest.Cluster, ns, job string) error {
	return settled(ctx, c, ns, job, 0)
}

// settled waits until the job has exactly n pods, none being deleted: a
// step is timed from a cluster at rest, not while the last one's pods are
// still coming or going (a scale back up before a scale-down's pods went
// would only take back nodes still on standby).
func settled(ctx context.Context, c *kubetest.Cluster, ns, job string, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "elastic.job=" + job})
		if err == nil && len(pods.Items) == n && !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
			return p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning
		}) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("job %s never settled at %d pods", job, n)
}
