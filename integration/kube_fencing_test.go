package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge"
)

// TestConfigMapWriteIsRetriedUntilItSucceeds denies the bridge the job's
// ConfigMap while the first generation commits, then allows it again: the
// ConfigMap appears for that generation, with no later generation to
// prompt it.
func TestConfigMapWriteIsRetriedUntilItSucceeds(t *testing.T) {
	t.Parallel()
	// The configmaps rule, narrowed to a name the job's ConfigMap does not have.
	denied := strings.Replace(rbacRules(t), `resources: ["configmaps"]`, `resources: ["configmaps"]`+"\n    resourceNames: [\"none\"]", 1)
	e := newKubeEnv(t, kubeOptions{role: denied, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=1"}})
	e.spec("retry", membership.DefaultSpec(membership.NP{Min: 2, Max: 2}))
	e.statefulSet("retry", "worker", 2, nil)
	st := e.status("retry", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	require.Eventually(t, func() bool {
		return strings.Contains(e.bridge.out.String(), `configmaps \"retry-elastic\" is forbidden`)
	}, 30*time.Second, 20*time.Millisecond, "the bridge never tried to write the ConfigMap:\n%s", e.bridge.out)

	e.setRole("")
	require.Eventually(t, func() bool {
		cm, err := e.c.Client.CoreV1().ConfigMaps(e.ns).Get(t.Context(), operatorbridge.ConfigMapName("retry"), metav1.GetOptions{})
		return err == nil && cm.Annotations[operatorbridge.AnnotationGeneration] == itoa64(st.Generation)
	}, 60*time.Second, 20*time.Millisecond, "the ConfigMap of generation %d was never written once RBAC allowed it:\n%s", st.Generation, e.bridge.out)
	now, err := e.client.Status(t.Context(), "retry")
	require.NoError(t, err)
	assert.Equal(t, st.Generation, now.Generation, "no later generation prompted the write")
	e.bridgeStatus("retry", func(b membership.BridgeStatus) bool { return b.Problem == "" })
}

// TestConfigMapOfANewerGenerationIsKept puts in place the ConfigMap of a
// generation the bridge has not seen, as the bridge of a newer leader
// writes it while a deposed one still runs on an older view, and commits
// the job's first generation: the bridge leaves the newer ConfigMap alone.
func TestConfigMapOfANewerGenerationIsKept(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=1"}})
	newer := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: operatorbridge.ConfigMapName("kept"), Labels: map[string]string{"elastic.job": "kept"},
			Annotations: map[string]string{operatorbridge.AnnotationGeneration: "100"}},
		Data: map[string]string{"ELASTIC_GENERATION": "100", "WORLD_SIZE": "8"},
	}
	_, err := e.c.Client.CoreV1().ConfigMaps(e.ns).Create(t.Context(), newer, metav1.CreateOptions{})
	require.NoError(t, err)
	e.spec("kept", membership.DefaultSpec(membership.NP{Min: 2, Max: 2}))
	e.statefulSet("kept", "worker", 2, nil)
	st := e.status("kept", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	require.Less(t, st.Generation, int64(100))

	var got *corev1.ConfigMap
	require.Eventually(t, func() bool {
		got, err = e.c.Client.CoreV1().ConfigMaps(e.ns).Get(t.Context(), newer.Name, metav1.GetOptions{})
		require.NoError(t, err)
		return got.Annotations[operatorbridge.AnnotationGeneration] != "100" ||
			strings.Contains(e.bridge.out.String(), "describes a newer generation")
	}, 30*time.Second, 20*time.Millisecond, "the bridge never dealt with generation %d:\n%s", st.Generation, e.bridge.out)
	assert.Equal(t, "100", got.Annotations[operatorbridge.AnnotationGeneration], "generation %d replaced a newer ConfigMap", st.Generation)
	assert.Equal(t, newer.Data, got.Data)
}
