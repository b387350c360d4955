package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/membership"
)

// TestTheControllerKeepsToItsOwn gives the controller what is not its own
// or cannot run (an adversarial review found each): the etcd records of a
// job of a namespace it does not serve, which it must leave alone; a
// StatefulSet of the job's name that is another's, which it must report,
// not take for its own; and a PaddleJob whose name is a valid job id too
// long for its pods' labels, which it must refuse, saying why.
func TestTheControllerKeepsToItsOwn(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"}})
	applyCRDs(t, e.c, e.dyn)
	keys := membership.DefaultKeys()

	foreign := membership.DefaultSpec(membership.NP{Min: 2, Max: 2})
	foreign.Owner = "ElasticJob/team-b/foreign/0b7e6c9a-0000-4000-8000-000000000001"
	e.spec("foreign", foreign)
	_, err := e.etcd.Client(t).Put(t.Context(), keys.Event("foreign", 1), `{"what":"the job's history"}`)
	require.NoError(t, err)

	labels := map[string]string{"app": "db"}
	zero := int32(0)
	_, err = e.c.Client.AppsV1().StatefulSets(e.ns).Create(t.Context(), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "clash-worker"},
		Spec: appsv1.StatefulSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "db:1"}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, e.createJob(elasticJobYAML("clash", 1, "")))

	long := "a" + strings.Repeat("b", 48) + "z"
	require.NoError(t, membership.ValidateJobID(long), "a valid job id")
	e.apply(fmt.Sprintf(`
apiVersion: batch.paddlepaddle.org/v1
kind: PaddleJob
metadata: {name: %s}
spec:
  worker: {replicas: 1, template: {spec: {containers: [{name: paddle, image: p, command: [%s]}]}}}
`, long, toyTrainer), e.ns)

	st := e.jobStatus("clash", "told the StatefulSet is another's", func(s jobv1.ElasticJobStatus) bool { return s.Problem != "" })
	assert.Contains(t, st.Problem, "StatefulSet clash-worker exists and is not this job's")
	assert.False(t, hasEvent(e.events("clash"), "Created", "StatefulSet clash-worker"), "the controller said it made what it did not")

	require.Eventually(t, func() bool {
		u, err := e.dyn.Resource(paddleJobs).Namespace(e.ns).Get(t.Context(), long, metav1.GetOptions{})
		if err != nil {
			return false
		}
		problem, _, _ := unstructured.NestedString(u.Object, "status", "elasticTraining", "problem")
		return strings.Contains(problem, "is too long: the worker pods' labels would pass 63 characters")
	}, 60*time.Second, 50*time.Millisecond, "the PaddleJob with a long name never said why it cannot run\ncoordinator:\n%s", e.bridge.out)
	_, err = e.c.Client.AppsV1().StatefulSets(e.ns).Get(t.Context(), long+"-worker", metav1.GetOptions{})
	assert.Error(t, err, "no StatefulSet for a job that cannot run")

	for _, key := range []string{keys.Spec("foreign"), keys.Event("foreign", 1)} {
		resp, err := e.etcd.Client(t).Get(t.Context(), key, clientv3.WithCountOnly())
		require.NoError(t, err)
		assert.Equal(t, int64(1), resp.Count, "%s, of a job of namespace team-b, was deleted:\n%s", key, e.bridge.out)
	}
}
