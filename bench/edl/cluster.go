package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
	"github.com/elastictraining/coordinator/internal/testkit/simnode"
	"github.com/elastictraining/coordinator/membership"
)

// The seed's cluster: 133 nodes, 2,348 allocatable CPU (87 of 18 and 46 of
// 17, ≈ 17.65 a node), memory to spare so that CPU binds, as only CPU was
// measured there.
const (
	nodeCount      = 133
	bigNodes       = 87
	allocatableCPU = 2348
)

// nodeCPU is each node's allocatable CPU in millicores.
func nodeCPU() map[string]int64 {
	out := make(map[string]int64, nodeCount)
	for i := range nodeCount {
		cpu := int64(17000)
		if i < bigNodes {
			cpu = 18000
		}
		out[nodeName(i)] = cpu
	}
	return out
}

func nodeName(i int) string { return fmt.Sprintf("edl-node-%03d", i) }

// addNodes registers the seed's nodes with kwok, each with a pod CIDR of
// its own, and removes the control plane's default node.
func addNodes(ctx context.Context, kube kubernetes.Interface) error {
	_ = kube.CoreV1().Nodes().Delete(ctx, "kwok-node-0", metav1.DeleteOptions{})
	for i := range nodeCount {
		cpu := "17"
		if i < bigNodes {
			cpu = "18"
		}
		capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("128Gi"),
			corev1.ResourcePods: resource.MustParse("110")}
		name := nodeName(i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": name}},
			Spec:   corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 100+i/250, i%250)},
			Status: corev1.NodeStatus{Allocatable: capacity, Capacity: capacity},
		}
		if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	high := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: nginxPriorityClass}, Value: 1000,
		Description: "nginx outranks the training jobs, as in the seed's case 2"}
	_, err := kube.SchedulingV1().PriorityClasses().Create(ctx, high, metav1.CreateOptions{})
	return err
}

const nginxPriorityClass = "edl-nginx"

// simulatedPods runs, for every Running pod of a job in ns, a simulated
// node — the real sidecar agent on etcd, with an in-memory workload — that
// registers as that pod; hundreds of real sidecar processes would not fit
// on this machine beside the control plane.
func simulatedPods(kube kubernetes.Interface, cli *clientv3.Client, ns string) (*kubetest.PodRunner, error) {
	var mu sync.Mutex
	return kubetest.StartPodRunner(kube, ns, "elastic.job", func(pod *corev1.Pod) (kubetest.Container, error) {
		mu.Lock()
		defer mu.Unlock()
		n, err := simnode.Launch(simnode.Config{
			Client: cli, Keys: membership.DefaultKeys(), Job: pod.Labels["elastic.job"], ID: pod.Name,
			Role: membership.Role(pod.Labels["elastic.role"]), Host: pod.Status.PodIP, Pod: pod.Name, PodUID: string(pod.UID),
			TTL: 5 * time.Second, Logger: hclog.NewNullLogger(),
		})
		if err != nil {
			return nil, err
		}
		return simContainer{n}, nil
	}, func(err error) { fmt.Println("pod runner:", err) })
}

type simContainer struct{ n *simnode.Node }

func (c simContainer) Stop() { go c.n.Leave() }
