package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
	"github.com/elastictraining/coordinator/memckpt"
	"github.com/elastictraining/coordinator/operatorbridge/admission"
)

// kueueRows are the timings of ElasticJobs in a Kueue queue, on real
// Kueue: from the job's Workload admitted (seen Admitted) to every trainer
// running, and from the create to the same; from a job of a higher
// priority created to the preempted job's trainers stopped and its state
// saved (every rank's checkpoint file holds the step the rank last saved),
// and to the preemptor's trainers running.
type kueueRows struct {
	admitted, create, preemptSaved, preemptorRunning []time.Duration
}

// measureKueue runs `coordinator serve --kubernetes --kueue` beside Kueue,
// a ClusterQueue of workers CPUs, and per run a job A of workers workers
// that trains with elastic.save, then a job C of the same size and a
// higher priority, which preempts A whole.
func measureKueue(ctx context.Context, c *kubetest.Cluster, binary, dir string, workers, runs int) (kueueRows, error) {
	var out kueueRows
	if err := c.StartKueue(ctx); err != nil {
		return out, err
	}
	ns := "bench-kueue"
	saves := filepath.Join(dir, "saves")
	dyn, done, err := startServe(ctx, c, binary, dir, ns, []string{"--kueue"}, func(pod *corev1.Pod) (kubetest.Container, error) {
		return runSaveTrainer(binary, pod, saves)
	})
	if err != nil {
		return out, err
	}
	defer done()
	queues := fmt.Sprintf(`
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: bench}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: bench}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
    - coveredResources: [cpu]
      flavors: [{name: bench, resources: [{name: cpu, nominalQuota: %d}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: bench, namespace: %s}
spec: {clusterQueue: bench}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: bench-low}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: bench-high}
value: 1000
`, workers, ns)
	if _, errOut, err := c.Kubectl(ctx, dir, queues, "apply", "-f", "-"); err != nil {
		return out, fmt.Errorf("apply the queues: %v: %s", err, errOut)
	}
	jobs := dyn.Resource(jobv1.GroupVersionResource).Namespace(ns)
	workloads := dyn.Resource(admission.Workloads).Namespace(ns)
	for i := range runs {
		a, pre := fmt.Sprintf("a-%d", i), fmt.Sprintf("c-%d", i)
		t0 := time.Now()
		created, err := jobs.Create(ctx, queuedJob(a, "bench-low", workers), metav1.CreateOptions{})
		if err != nil {
			return out, err
		}
		admittedAt, err := seenAdmitted(ctx, workloads, admission.WorkloadName(jobv1.Kind, a, created.GetUID()))
		if err != nil {
			return out, err
		}
		at, _, err := allStarted(ctx, filepath.Join(saves, a), workers, 0)
		if err != nil {
			return out, fmt.Errorf("admission: %w", err)
		}
		out.admitted = append(out.admitted, at.Sub(admittedAt))
		out.create = append(out.create, at.Sub(t0))
		if err := trained(ctx, filepath.Join(saves, a), workers, 20); err != nil {
			return out, err
		}

		t0 = time.Now()
		if _, err := jobs.Create(ctx, queuedJob(pre, "bench-high", workers), metav1.CreateOptions{}); err != nil {
			return out, err
		}
		savedAt, err := stateSaved(ctx, jobs, a, filepath.Join(saves, a), workers)
		if err != nil {
			return out, fmt.Errorf("preemption: %w", err)
		}
		out.preemptSaved = append(out.preemptSaved, savedAt.Sub(t0))
		at, _, err = allStarted(ctx, filepath.Join(saves, pre), workers, 0)
		if err != nil {
			return out, fmt.Errorf("preemptor: %w", err)
		}
		out.preemptorRunning = append(out.preemptorRunning, at.Sub(t0))
		for _, name := range []string{pre, a} {
			if err := jobs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				return out, err
			}
			if err := gone(ctx, c, ns, name); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// queuedJob is an ElasticJob of workers workers in the bench's LocalQueue,
// of a WorkloadPriorityClass, each worker asking for a CPU.
func queuedJob(name, class string, workers int) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion(jobv1.Group + "/" + jobv1.Version)
	obj.SetKind(jobv1.Kind)
	obj.SetName(name)
	obj.SetLabels(map[string]string{admission.QueueLabel: "bench", admission.PriorityClassLabel: class})
	obj.Object["spec"] = map[string]any{"worker": map[string]any{
		"replicas": int64(workers),
		"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
			"name": "trainer", "image": "trainer", "command": []any{"python3", "train.py"},
			"resources": map[string]any{"requests": map[string]any{"cpu": "1"}},
		}}}},
	}}
	return obj
}

// seenAdmitted polls a Workload until it is admitted and returns when
// that was seen: its condition's time has only seconds.
func seenAdmitted(ctx context.Context, workloads dynamic.ResourceInterface, name string) (time.Time, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if obj, err := workloads.Get(ctx, name, metav1.GetOptions{}); err == nil {
			var wl kueue.Workload
			if runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &wl) == nil &&
				apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) {
				return time.Now(), nil
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("workload %s never admitted", name)
}

// trained waits for every rank to have saved steps steps.
func trained(ctx context.Context, dir string, ranks, steps int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n := 0
		for r := range ranks {
			if last(dir, r) >= steps {
				n++
			}
		}
		if n == ranks {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%d ranks never trained %d steps", ranks, steps)
}

// stateSaved waits for a preempted job to be Suspended with every rank's
// checkpoint file holding the step the rank last saved (or the one after:
// a rank stopped between its save and its note of it), and returns when
// the last of those files was written.
func stateSaved(ctx context.Context, jobs dynamic.ResourceInterface, job, dir string, ranks int) (time.Time, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		obj, err := jobs.Get(ctx, job, metav1.GetOptions{})
		if phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase"); err != nil || phase != jobv1.PhaseSuspended {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		var latest time.Time
		held := 0
		for r := range ranks {
			file := filepath.Join(dir, fmt.Sprintf("rank-%d.ckpt", r))
			c, err := memckpt.ReadFile(file)
			info, statErr := os.Stat(file)
			if err != nil || statErr != nil || c.Seq < int64(last(dir, r)) {
				continue
			}
			held++
			if info.ModTime().After(latest) {
				latest = info.ModTime()
			}
		}
		if held == ranks {
			return latest, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	var held []string
	for r := range ranks {
		c, err := memckpt.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.ckpt", r)))
		held = append(held, fmt.Sprintf("rank %d saved %d, its file holds %d (%v)", r, last(dir, r), c.Seq, err))
	}
	return time.Time{}, fmt.Errorf("the preempted job's state was never all saved: %s", strings.Join(held, "; "))
}

// last is the step a save-trainer rank last saved.
func last(dir string, rank int) int {
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.last", rank)))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// runSaveTrainer runs the injected command with testdata/savetrainer.py
// for the training command: it keeps its step with elastic.save alone and
// writes down when it started.
func runSaveTrainer(binary string, pod *corev1.Pod, saves string) (kubetest.Container, error) {
	c := pod.Spec.Containers[0]
	args := append(slices.Clone(c.Command[1:]), c.Args...)
	dash := slices.Index(args, "--")
	if c.Command[0] != "/elastic/coordinator" || dash < 0 {
		return nil, fmt.Errorf("pod %s: the sidecar was not injected", pod.Name)
	}
	trainer, err := filepath.Abs(filepath.Join("testdata", "savetrainer.py"))
	if err != nil {
		return nil, err
	}
	args = append(args[:dash+1], "/usr/bin/python3", trainer)
	return startInjected(binary, pod, args, "SAVE_DIR="+filepath.Join(saves, pod.Labels[jobv1.LabelJob]))
}
