package operatorbridge

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
)

func TestContainersStopped(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	terminated := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	status := func(name string, s corev1.ContainerState) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: s}
	}
	pod := func(phase corev1.PodPhase, statuses ...corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer"}, {Name: "log"}}},
			Status: corev1.PodStatus{Phase: phase, ContainerStatuses: statuses},
		}
	}
	byPodGC := pod(corev1.PodFailed, status("trainer", running), status("log", running))
	byPodGC.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC"}}
	nativeSidecar := pod(corev1.PodRunning, status("trainer", terminated), status("log", terminated))
	nativeSidecar.Status.InitContainerStatuses = []corev1.ContainerStatus{status("proxy", running)}

	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"every container terminated", pod(corev1.PodRunning, status("trainer", terminated), status("log", terminated)), true},
		{"succeeded", pod(corev1.PodSucceeded), true},
		{"failed", pod(corev1.PodFailed, status("trainer", running), status("log", running)), true},
		{"deleted by force while running", pod(corev1.PodRunning, status("trainer", running), status("log", running)), false},
		{"one container still runs", pod(corev1.PodRunning, status("trainer", terminated), status("log", running)), false},
		{"one container never reported", pod(corev1.PodRunning, status("trainer", terminated)), false},
		{"nothing reported", pod(corev1.PodPending), false},
		{"a container waits", pod(corev1.PodRunning, status("trainer", terminated), status("log", waiting)), false},
		{"an init container still runs", nativeSidecar, false},
		{"failed by PodGC: its node object is gone", byPodGC, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, containersStopped(tc.pod))
		})
	}
}
