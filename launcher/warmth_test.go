package launcher_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/launcher"
)

// gateModule, preloaded, holds a warm interpreter's imports while the file
// hold is in WARM_DIR: a slow `import torch` the test ends when it wants.
const gateModule = `import os, time
while os.path.exists(os.path.join(os.environ["WARM_DIR"], "hold")):
    time.sleep(0.01)
`

// Cold says whether the next start would find every slot's warm
// interpreter ready, and its channel says when that changes: a sidecar
// writes it in its node's record, and the leader gives a cold node's rank
// to a warm spare.
func TestColdSaysWhetherTheNextStartIsWarm(t *testing.T) {
	j := newUnleasedWarmJob(t, "auto", "gate", "warmmark")
	require.NoError(t, os.WriteFile(filepath.Join(j.dir, "gate.py"), []byte(gateModule), 0o644))
	hold := filepath.Join(j.dir, "hold")
	cold, _ := j.l.Cold()
	assert.True(t, cold, "no warm interpreter yet")
	ready, err := j.l.Prewarm(t.Context(), 2)
	require.NoError(t, err)
	require.Equal(t, 2, ready)
	cold, _ = j.l.Cold()
	assert.False(t, cold, "prewarmed")

	// warmAgain waits for the change that makes the node warm, told on
	// the channel.
	warmAgain := func(what string) {
		t.Helper()
		cold, changed := j.l.Cold()
		require.True(t, cold)
		require.NoError(t, os.Remove(hold))
		require.Eventually(t, func() bool {
			select {
			case <-changed:
				cold, changed = j.l.Cold()
				return !cold
			default:
				return false
			}
		}, 30*time.Second, 5*time.Millisecond, "never warm again after %s; output:\n%s", what, j.out.String())
	}

	require.NoError(t, j.l.SetDeadline(lease, time.Now().Add(time.Hour)))
	require.NoError(t, os.WriteFile(hold, nil, 0o644))
	exits := j.run(t, 1, "MODE=wait")
	cold, _ = j.l.Cold()
	assert.True(t, cold, "the start used the warm interpreters; their replacements import")
	warmAgain("a start")

	// The guard dies: its warm interpreters with it, and its
	// replacement's import.
	require.NoError(t, os.WriteFile(hold, nil, 0o644))
	dead, ok := guard.ParentOf(readPid(t, filepath.Join(j.dir, "running-0")))
	require.True(t, ok)
	require.NoError(t, syscall.Kill(dead, syscall.SIGKILL))
	assert.Equal(t, launcher.Exit{Code: 137, Message: "the process guard died"}, wait(t, exits))
	cold, _ = j.l.Cold()
	assert.True(t, cold, "the guard that died took its warm interpreters")
	warmAgain("the guard died")

	// A fence kills them too.
	require.NoError(t, j.l.Kill(t.Context()))
	cold, _ = j.l.Cold()
	assert.True(t, cold, "fenced")
}
