package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
