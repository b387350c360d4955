package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
)

// The seed's job: trainers of 5 CPU and 8 Gi, 2 parameter servers of 4 CPU
// and 5 Gi; 2 to 60 trainers when autoscaled. (Its 1-CPU master has no
// counterpart: the coordinator is shared.)
const (
	minTrainers = 2
	maxTrainers = 60
)

// submitJob creates an ElasticJob of the seed's shape: autoscaled from 2
// trainers (2..60), or fixed at `fixed` trainers.
func (p *pass) submitJob(ctx context.Context, name string, fixed int) error {
	worker := map[string]any{"replicas": int64(minTrainers), "minReplicas": int64(minTrainers), "maxReplicas": int64(maxTrainers)}
	if fixed > 0 {
		worker = map[string]any{"replicas": int64(fixed)}
	}
	worker["template"] = p.podTemplate("trainer", "5", "8Gi")
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": jobv1.Group + "/" + jobv1.Version, "kind": jobv1.Kind,
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"worker": worker,
			"ps": map[string]any{"replicas": int64(2), "template": p.podTemplate("pserver", "4", "5Gi")}},
	}}
	_, err := p.env.dyn.Resource(jobv1.GroupVersionResource).Namespace(p.ns).Create(ctx, obj, metav1.CreateOptions{})
	return err
}

func (p *pass) podTemplate(name, cpu, memory string) map[string]any {
	return map[string]any{"spec": map[string]any{"schedulerName": p.env.scheduler, "containers": []any{map[string]any{
		"name": name, "image": "paddlepaddle/paddle", "command": []any{"python", "train.py"},
		"resources": map[string]any{"requests": map[string]any{"cpu": cpu, "memory": memory},
			"limits": map[string]any{"cpu": cpu, "memory": memory}},
	}}}}
}

// scaleJob sets an ElasticJob's trainers through its scale subresource.
func (p *pass) scaleJob(ctx context.Context, name string, n int) error {
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
	_, err := p.env.dyn.Resource(jobv1.GroupVersionResource).Namespace(p.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "scale")
	return err
}

// nginx sets the nginx Deployment's replicas, creating it the first time:
// 3 CPU and 3 Gi a pod, of a priority above the jobs'.
func (p *pass) nginx(ctx context.Context, replicas int32) error {
	p.dumpNodes(ctx, fmt.Sprintf("before nginx → %d", replicas))
	p.mark("nginx", int(replicas))
	deployments := p.env.kube.AppsV1().Deployments(p.ns)
	if _, err := deployments.Get(ctx, "nginx", metav1.GetOptions{}); err == nil {
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
		_, err = deployments.Patch(ctx, "nginx", types.MergePatchType, patch, metav1.PatchOptions{}, "scale")
		return err
	}
	labels := map[string]string{"app": "nginx"}
	qty := resource.MustParse
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				PriorityClassName: nginxPriorityClass, SchedulerName: p.env.scheduler,
				Containers: []corev1.Container{{Name: "nginx", Image: "nginx", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: qty("3"), corev1.ResourceMemory: qty("3Gi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: qty("3"), corev1.ResourceMemory: qty("3Gi")}}}},
			}}},
	}
	_, err := deployments.Create(ctx, d, metav1.CreateOptions{})
	return err
}

// sleep waits d of the seed's schedule, compressed.
func (p *pass) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d / time.Duration(p.env.compress)):
		return nil
	}
}

// case1 is the seed's case 1: 20 jobs submitted 10 s apart, then 300 s.
func (p *pass) case1(ctx context.Context) error {
	for i := range 20 {
		if i > 0 {
			if err := p.sleep(ctx, 10*time.Second); err != nil {
				return err
			}
		}
		fixed := 0
		if p.mode == modeOff {
			fixed = maxTrainers
		}
		if err := p.submit(ctx, i, fixed); err != nil {
			return err
		}
	}
	return p.sleep(ctx, 300*time.Second)
}

// case2 is the seed's case 2: nginx at 400, 30 s; six jobs 5 s apart (15
// trainers each when not autoscaled); 60 s; then nginx 400 → 300 → 200 →
// 100 → 200 → 300 → 400, 90 s a step, 120 s at the end.
func (p *pass) case2(ctx context.Context) error {
	if err := p.nginx(ctx, 400); err != nil {
		return err
	}
	if err := p.sleep(ctx, 30*time.Second); err != nil {
		return err
	}
	for i := range 6 {
		if i > 0 {
			if err := p.sleep(ctx, 5*time.Second); err != nil {
				return err
			}
		}
		fixed := 0
		if p.mode == modeOff {
			fixed = 15
		}
		if err := p.submit(ctx, i, fixed); err != nil {
			return err
		}
	}
	if err := p.sleep(ctx, 60*time.Second); err != nil {
		return err
	}
	for i, n := range []int32{300, 200, 100, 200, 300, 400} {
		if err := p.nginx(ctx, n); err != nil {
			return err
		}
		wait := 90 * time.Second
		if i == 5 {
			wait = 120 * time.Second
		}
		if err := p.sleep(ctx, wait); err != nil {
			return err
		}
	}
	p.dumpNodes(ctx, "at the end")
	return nil
}

func (p *pass) submit(ctx context.Context, i, fixed int) error {
	name := fmt.Sprintf("%s-j%02d", p.ns, i)
	p.mu.Lock()
	p.jobs = append(p.jobs, &jobTimes{name: name, submitted: time.Since(p.start)})
	p.mu.Unlock()
	return p.submitJob(ctx, name, fixed)
}

// dumpNodes writes, with -logs, how many nodes hold each mix of pods
// (nginx, trainers, servers, free CPU): where the room went.
func (p *pass) dumpNodes(ctx context.Context, when string) {
	if p.env.logs == "" {
		return
	}
	pods, err := p.env.kube.CoreV1().Pods(p.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	type mix struct{ nginx, trainers, servers int }
	free, mixes := nodeCPU(), map[string]*mix{}
	for name := range free {
		mixes[name] = &mix{}
	}
	for _, pod := range pods.Items {
		m := mixes[pod.Spec.NodeName]
		if m == nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range pod.Spec.Containers {
			free[pod.Spec.NodeName] -= c.Resources.Requests.Cpu().MilliValue()
		}
		switch {
		case pod.Labels["app"] == "nginx":
			m.nginx++
		case pod.Labels["elastic.role"] == "worker":
			m.trainers++
		default:
			m.servers++
		}
	}
	counts := map[string]int{}
	for name, m := range mixes {
		counts[fmt.Sprintf("%d nginx + %d trainers + %d servers, %d CPU free", m.nginx, m.trainers, m.servers, free[name]/1000)]++
	}
	keys := slices.Sorted(maps.Keys(counts))
	f, err := os.OpenFile(filepath.Join(p.env.logs, p.ns+".nodes"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s (%s):\n", when, time.Since(p.start).Round(time.Second))
	for _, k := range keys {
		fmt.Fprintf(f, "  %3d nodes: %s\n", counts[k], k)
	}
}
