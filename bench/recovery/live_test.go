package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSweepKillsOnlyWhatCarriesTheJobsDirectory(t *testing.T) {
	tmp := t.TempDir()
	start := func(logDir string) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.Env = append(os.Environ(), "BENCH_LOG_DIR="+logDir)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	job := start(filepath.Join(tmp, "job-1", "steps"))
	other := start(filepath.Join(tmp, "job-10", "steps"))
	elsewhere := start(filepath.Join(t.TempDir(), "steps"))

	assert.ElementsMatch(t, []int{job.Process.Pid, other.Process.Pid}, leftovers(tmp))
	sweep(filepath.Join(tmp, "job-1", "steps"))
	err := job.Wait()
	require.Error(t, err, "the job's process was killed")
	assert.Equal(t, []int{other.Process.Pid}, leftovers(tmp))
	assert.Nil(t, other.ProcessState)
	assert.Nil(t, elsewhere.ProcessState)
}
