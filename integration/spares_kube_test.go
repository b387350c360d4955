package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
)

// TestAnElasticJobsSpareTakesADeletedPodsRank runs an ElasticJob of two
// workers and a spare: the workers' StatefulSet holds three pods, the
// scale subresource counts two, and a member's pod deleted is replaced by
// the spare in one generation, its pod coming back as the spare.
func TestAnElasticJobsSpareTakesADeletedPodsRank(t *testing.T) {
	t.Parallel()
	e := newKubeEnv(t, kubeOptions{injected: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"}})
	applyCRDs(t, e.c, e.dyn)
	manifest := elasticJobYAML("spared", 2, "")
	manifest = manifest[:len(manifest)-1] + "\n    spares: 1\n"
	e.kubectl(manifest, "apply", "-f", "-")
	before := e.jobStatus("spared", "Running at 2 with a spare", func(s jobv1.ElasticJobStatus) bool {
		return runningAt(2)(s) && s.Replicas == 2 && s.Spares == 1
	})
	sts, err := e.c.Client.AppsV1().StatefulSets(e.ns).Get(t.Context(), "spared-worker", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(3), *sts.Spec.Replicas, "the StatefulSet holds the spare")

	plan, err := e.client.Plan(t.Context(), "spared")
	require.NoError(t, err)
	members := map[string]bool{}
	for _, m := range plan.Members {
		members[m.Node] = true
	}
	spare := ""
	for _, p := range []string{"spared-worker-0", "spared-worker-1", "spared-worker-2"} {
		if !members[p] {
			spare = p
		}
	}
	require.NotEmpty(t, spare, "members %v", members)
	victim := plan.Members[1].Node

	require.NoError(t, e.c.Client.CoreV1().Pods(e.ns).Delete(t.Context(), victim, metav1.DeleteOptions{}))
	after := e.jobStatus("spared", "Running at 2 again", func(s jobv1.ElasticJobStatus) bool {
		return runningAt(2)(s) && s.Generation > before.Generation
	})
	assert.Equal(t, before.Generation+1, after.Generation, "one restart for one pod deleted")
	plan, err = e.client.Plan(t.Context(), "spared")
	require.NoError(t, err)
	took := map[string]bool{}
	for _, m := range plan.Members {
		took[m.Node] = true
	}
	assert.True(t, took[spare], "the spare %s runs in generation %d: %+v", spare, plan.Generation, plan.Members)
	assert.False(t, took[victim], "the deleted pod's node is not waited for")
	// Its pod back, the node registers as the spare.
	require.Eventually(t, func() bool {
		nodes, err := e.client.Nodes(t.Context(), "spared")
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.ID == victim {
				return true
			}
		}
		return false
	}, 60*time.Second, 20*time.Millisecond, "the deleted pod's node never came back")
	st := e.jobStatus("spared", "a spare again", func(s jobv1.ElasticJobStatus) bool { return s.Spares == 1 && s.Replicas == 2 })
	assert.Equal(t, after.Generation, st.Generation, "the node's return restarted nothing")
}
