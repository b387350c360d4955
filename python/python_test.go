package python

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/pythons"
	"github.com/elastictraining/coordinator/trainerenv"
)

// interpreter is Debian's Python, whose torch (python3-torch) the tests
// use; .ci/run installs it.
const interpreter = pythons.Debian

func requireTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(interpreter, "-c", "import torch").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import torch (apt-get install python3-torch): %v\n%s", interpreter, err, out)
	}
}

// The package's own tests (python/tests, unittest), run by `make test`
// through this one, on Debian's torch 1.13 and PyPI's torch 2.15.
func TestThePackagesOwnTests(t *testing.T) {
	for _, py := range pythons.Torches(t) {
		t.Run(py.Name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(py.Path, "-m", "unittest", "discover", "-s", "tests", "-v")
			cmd.Env = append(os.Environ(), "PYTHONPATH=.")
			out, err := cmd.CombinedOutput()
			t.Logf("%s", out)
			require.NoError(t, err)
		})
	}
}

// One command installs the package outside a sidecar, and a script
// written with elastic.run then runs on its own.
func TestThePackageInstallsWithOneCommand(t *testing.T) {
	requireTorch(t)
	// pip builds in the source directory: a copy of it, so that the
	// repository is left as it was.
	src, target := t.TempDir(), t.TempDir()
	for _, name := range append([]string{"pyproject.toml"}, Package...) {
		require.NoError(t, os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755))
		data, err := os.ReadFile(name)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(src, name), data, 0o644))
	}
	out, err := exec.Command(interpreter, "-m", "pip", "install", "--quiet", "--no-deps", "--target", target, src).CombinedOutput()
	require.NoError(t, err, "pip install ./python:\n%s", out)
	for _, name := range Package {
		assert.FileExists(t, filepath.Join(target, name))
	}
	script := `import torch, elastic
model = torch.nn.Linear(2, 1)
def train(gen):
    for step in gen.steps(2):
        model(torch.ones(2)).sum().backward()
    return "rank %d of %d, %s" % (gen.rank, gen.world_size, elastic.__file__)
print(elastic.run(train, state={"model": model}))
`
	cmd := exec.Command(interpreter, "-c", script)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PYTHONPATH="+target)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "rank 0 of 1, "+filepath.Join(target, "elastic", "__init__.py"), strings.TrimSpace(string(out)))
}

// The Go side and the Python side name the same things the same way: the
// environment variables, the in-place protocol's messages, the version.
func TestTheGoAndPythonSidesAgree(t *testing.T) {
	constants := func(file string) map[string]string {
		src := string(Source(file))
		out := map[string]string{}
		for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+) = "([^"]*)"`).FindAllStringSubmatch(src, -1) {
			out[m[1]] = m[2]
		}
		return out
	}
	checkpoint, inplace, progress := constants("elastic/checkpoint.py"), constants("elastic/inplace.py"), constants("elastic/progress.py")
	for _, c := range []struct {
		py        map[string]string
		name, go_ string
	}{
		{checkpoint, "SOCKET_ENV", trainerenv.ElasticCheckpointSocket},
		{checkpoint, "INCARNATION_ENV", trainerenv.ElasticCheckpointIncarnation},
		{checkpoint, "WATCHDOG_SOCKET_ENV", guard.EnvWatchdogSocket},
		{checkpoint, "FENCE_SOCKET_ENV", guard.EnvFenceSocket},
		{inplace, "FENCE_SOCKET_ENV", guard.EnvFenceSocket},
		{inplace, "SPARE_ENV", guard.EnvSpare},
		{progress, "FD_ENV", guard.EnvProgressFD},
	} {
		assert.Equal(t, c.go_, c.py[c.name], "%s", c.name)
	}

	// The in-place protocol, as inplace.py writes and reads it.
	src := string(Source("elastic/inplace.py"))
	has := func(pattern string) bool { return regexp.MustCompile(pattern).MatchString(src) }
	for _, op := range []string{guard.OpInPlace, guard.TrainerLeft} {
		assert.True(t, has(`"op":\s*"`+regexp.QuoteMeta(op)+`"`), "the trainer sends %q", op)
	}
	for _, op := range []string{guard.TrainerLeave, guard.TrainerRun} {
		assert.True(t, has(`m\.get\("op"\) == "`+regexp.QuoteMeta(op)+`"`), "the trainer reads %q", op)
	}
	for _, name := range []string{trainerenv.ElasticGeneration, "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"} {
		assert.True(t, has(`"`+name+`"`), "inplace.py reads %s", name)
	}

	// One version: the package's is the coordinator's.
	version, err := os.ReadFile("../VERSION")
	require.NoError(t, err)
	project, err := os.ReadFile("pyproject.toml")
	require.NoError(t, err)
	assert.Contains(t, string(project), `version = "`+strings.TrimPrefix(strings.TrimSpace(string(version)), "v")+`"`)

	// Every file of the package is embedded and written.
	files, err := filepath.Glob("elastic/*.py")
	require.NoError(t, err)
	assert.ElementsMatch(t, files, Package)
}
