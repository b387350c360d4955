package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/pythons"
)

// The seeds' PaddleJob (deploy/samples/wide-and-deep-paddlejob.yaml: two
// parameter servers, two workers, its image's command) and MSJob
// (deploy/samples/widedeep-msjob.yaml: a scheduler and its workers),
// applied with kubectl, train with the real frameworks on the test
// control plane: each pod's injected sidecar runs, in place of the
// image's script, the real framework's job of testdata/frameworks
// (paddle_ps.py, mindspore_dp.py) with the environment the sidecar gives.
// A worker's training process killed, each job trains on in a new
// generation from its checkpoint, every worker with the same parameters.
// The MSJob runs two workers here, not the sample's four (this machine
// has two cores), and restartPolicy ExitCode, not the sample's Never
// (which ends the job at its first failure, as under ms-operator).
func TestTheSeedSamplesTrainWithTheRealFrameworks(t *testing.T) {
	t.Parallel()
	paddle, mindspore := pythons.Paddle(t), pythons.MindSpore(t)
	marker := "ELASTIC_TEST_MARK=" + newMarker()
	mirror := demoRegistry(t)
	e := newKubeEnv(t, kubeOptions{injected: true, bridgeArgs: []string{"--registry-mirror", "registry.baidubce.com=" + mirror},
		realTrainer: func(training []string, dir string) ([]string, []string, bool) {
			vars := []string{marker, "STEP_SECONDS=0.1", "SAVE_EVERY=5"}
			switch line := strings.Join(training, " "); {
			case line == "python train.py": // the wide-and-deep image's own command
				return []string{paddle, paddlePS}, append(vars, "PADDLE_DIR="+dir), true
			case strings.Contains(line, "train_and_eval_distribute.py"):
				return []string{mindspore, mindsporeDP}, append(vars, "MS_DIR="+dir), true
			}
			return nil, nil, false
		}})
	applyCRDs(t, e.c, e.dyn)
	samples := t.TempDir()
	apply := func(sample string, edit func(string) string) {
		t.Helper()
		manifest := strings.ReplaceAll(mustRead(t, filepath.Join(repoRoot, "deploy", "samples", sample)), "namespace: elastic-system", "namespace: "+e.ns)
		copied := filepath.Join(samples, sample)
		require.NoError(t, os.WriteFile(copied, []byte(edit(manifest)), 0o644))
		e.kubectl("", "apply", "-f", copied)
	}
	out := func() string { return e.bridge.out.String() }

	t.Run("the PaddleJob", func(t *testing.T) {
		apply("wide-and-deep-paddlejob.yaml", func(s string) string { return s })
		dir := filepath.Join(e.toyDir, "wide-and-deep")
		gen, _ := trainedIn(t, dir, 0, 2, 10, out)
		serversFound(t, dir, gen, 2)
		require.NoError(t, syscall.Kill(frameworkProcess(t, marker, paddlePS, "PADDLE_DIR="+dir, "TRAINING_ROLE=TRAINER", "PADDLE_TRAINER_ID=1"), syscall.SIGKILL))
		gen, second := trainedIn(t, dir, gen, 2, 10, out)
		assert.Greater(t, second, 1, "the job resumed from its checkpoint, not from the start")
		serversFound(t, dir, gen, 2)
		sameParameters(t, dir)
		e.kubectl("", "delete", "paddlejob", "wide-and-deep", "-n", e.ns)
	})

	t.Run("the MSJob", func(t *testing.T) {
		apply("widedeep-msjob.yaml", func(s string) string {
			two := strings.Replace(s, "replicas: 4 # Worker数量", "replicas: 2 # Worker数量", 1)
			require.NotEqual(t, s, two, "the sample's workers")
			// The sample's restartPolicy Never ends the job at its first
			// failure, as under ms-operator; kubeflow's ExitCode restarts
			// a worker killed by a signal (exit code 137).
			exitCode := strings.ReplaceAll(two, "restartPolicy: Never", "restartPolicy: ExitCode")
			require.Equal(t, 2, strings.Count(exitCode, "restartPolicy: ExitCode"), "the sample's restart policies")
			return exitCode
		})
		dir := filepath.Join(e.toyDir, "ms-widedeep-dataparallel")
		gen, _ := trainedIn(t, dir, 0, 2, 10, out)
		require.NoError(t, syscall.Kill(frameworkProcess(t, marker, mindsporeDP, "MS_DIR="+dir, "MS_ROLE=MS_WORKER", "MS_NODE_ID=1"), syscall.SIGKILL))
		_, second := trainedIn(t, dir, gen, 2, 10, out)
		assert.Greater(t, second, 1, "the job resumed from its checkpoint, not from the start")
		sameParameters(t, dir)
	})
}
