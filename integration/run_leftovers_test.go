package integration

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/memckpt"
)

// moduleDirs are the directories of the trainers' modules sidecars made in
// tmp.
func moduleDirs(t *testing.T, tmp string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(tmp, memckpt.ModuleDirPrefix+"*"))
	require.NoError(t, err)
	return dirs
}

// runDataDirs are the data directories runs made in tmp.
func runDataDirs(t *testing.T, tmp string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(tmp, "coordinator-run-*"))
	require.NoError(t, err)
	return dirs
}

// `run ... | head`: once head has gone, run stops its nodes with their
// grace, as after SIGTERM, removes its etcd's data, and exits 141 (128 +
// SIGPIPE), instead of dying at its next write with everything left
// behind.
func TestRunWhoseReaderGoesStopsAndCleansUp(t *testing.T) {
	t.Parallel()
	tmp, marker := t.TempDir(), newMarker()
	cmd := exec.Command(binary, "run", "--np", "2", "--job", "piped", "--", "testdata/toytrainer.sh")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), patientDial, "TMPDIR="+tmp, "TOY_DIR="+t.TempDir(), "TOY_STEPS=100000", "TOY_INTERVAL=0.05",
		"ELASTIC_TEST_MARK="+marker)
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout = pw
	stderr := &proctest.Buffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	pw.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})

	// As head -n does: read until the job trains, then go.
	lines := bufio.NewScanner(pr)
	steps := 0
	for steps < 4 && lines.Scan() {
		if strings.Contains(lines.Text(), "] step ") {
			steps++
		}
	}
	require.Equal(t, 4, steps, "the job never trained; stderr:\n%s", stderr)
	require.Len(t, runDataDirs(t, tmp), 1, "run keeps its etcd's data in TMPDIR")
	require.NoError(t, pr.Close())

	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("run did not stop once its reader went; stderr:\n%s", stderr)
	}
	assert.Equal(t, 128+int(syscall.SIGPIPE), cmd.ProcessState.ExitCode(), "stderr:\n%s", stderr)
	assert.Empty(t, runDataDirs(t, tmp), "the etcd data was removed")
	assert.Empty(t, processesWithMarker(marker), "no process of the job is left")
}

// A run killed with SIGKILL cannot remove its etcd's data, nor its
// sidecars their modules' directories; the next run does, and says so. A
// run that is alive keeps its own, whatever other runs start beside it.
func TestTheDataOfAKilledRunIsRemovedByTheNext(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	running := func(r *localRun, job string) {
		r.status(job, "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	}
	killed := startRun(t, []string{"--np", "1", "--job", "killed"}, toy, "TMPDIR="+tmp, "TOY_STEPS=100000")
	running(killed, "killed")
	left, modules := runDataDirs(t, tmp), moduleDirs(t, tmp)
	require.Len(t, left, 1)
	require.NotEmpty(t, modules)
	require.NoError(t, killed.cmd.Process.Kill())
	killed.wait()
	killed.assertNoLeftovers()
	require.DirExists(t, left[0], "a run killed with SIGKILL leaves its data")
	require.Equal(t, modules, moduleDirs(t, tmp), "and its sidecars their modules")

	next := startRun(t, []string{"--np", "1", "--job", "next"}, toy, "TMPDIR="+tmp, "TOY_STEPS=100000")
	running(next, "next")
	assert.Contains(t, next.out.String(), "coordinator run: removed 1 data directory of runs that were killed (")
	assert.Contains(t, next.out.String(), "coordinator run: removed "+english.Count(len(modules), "module directory")+" of sidecars that were killed from "+tmp+"\n")
	assert.NoDirExists(t, left[0])
	for _, dir := range modules {
		assert.NoDirExists(t, dir)
	}
	own, ownModules := runDataDirs(t, tmp), moduleDirs(t, tmp)
	require.Len(t, own, 1)
	require.NotEmpty(t, ownModules)

	beside := startRun(t, []string{"--np", "1", "--job", "beside"}, toy, "TMPDIR="+tmp, "TOY_STEPS=100000")
	running(beside, "beside")
	assert.NotContains(t, beside.out.String(), "removed")
	assert.DirExists(t, own[0], "a live run's data is kept")
	for _, dir := range ownModules {
		assert.FileExists(t, filepath.Join(dir, "elastic", "__init__.py"), "and its sidecars' modules")
	}
	assert.Len(t, runDataDirs(t, tmp), 2)
	for _, r := range []*localRun{next, beside} {
		require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
		assert.Equal(t, 143, r.wait())
	}
	assert.Empty(t, runDataDirs(t, tmp), "runs that end remove their data")
	assert.Empty(t, moduleDirs(t, tmp), "and their sidecars their modules")
}
