package memckpt

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// moduleDirOwner is a sidecar's part that owns a module directory, in a
// process of its own: it makes one in MEMCKPT_TMP, starts a child as a
// trainer (which outlives it if it is killed), prints the directory and
// the child's pid, and keeps the directory until its standard input ends.
func moduleDirOwner() {
	d, err := NewModuleDir(os.Getenv("MEMCKPT_TMP"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	child := exec.Command("sleep", "3600")
	if err := child.Start(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(d.Path(), child.Process.Pid)
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = child.Process.Kill()
	_ = child.Wait()
	d.Close()
}

// owner is a moduleDirOwner process.
type owner struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	dir   string
	child int
}

func startOwner(t *testing.T, tmp string) *owner {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "MEMCKPT_HELPER=module-dir", "MEMCKPT_TMP="+tmp)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	o := &owner{cmd: cmd, stdin: stdin}
	t.Cleanup(func() { o.stdin.Close(); _ = o.cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	_, err = fmt.Sscan(line, &o.dir, &o.child)
	require.NoError(t, err, "owner said %q", line)
	require.True(t, strings.HasPrefix(o.dir, filepath.Join(tmp, ModuleDirPrefix)), "owner said %q", o.dir)
	return o
}

// kill ends the owner with SIGKILL, which leaves its directory behind,
// and its child running.
func (o *owner) kill(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { _ = syscall.Kill(o.child, syscall.SIGKILL) })
	require.NoError(t, o.cmd.Process.Kill())
	_ = o.cmd.Wait()
	require.FileExists(t, filepath.Join(o.dir, "elastic", "__init__.py"), "a sidecar killed with SIGKILL leaves its modules")
	require.True(t, proctest.Alive(o.child), "its child outlives it")
}

// A module directory whose owner was killed is swept; one whose owner
// lives is not, nor is one an older build wrote (nothing tells whether it
// runs), nor one just made and not yet owned.
func TestSweepRemovesTheModuleDirsOfKilledSidecarsOnly(t *testing.T) {
	tmp := t.TempDir()
	killed, live := startOwner(t, tmp), startOwner(t, tmp)
	killed.kill(t)

	older := filepath.Join(tmp, ModuleDirPrefix+"older")
	require.NoError(t, WriteModule(older))
	old := time.Now().Add(-2 * unownedDirAge)
	require.NoError(t, os.Chtimes(older, old, old))
	starting := filepath.Join(tmp, ModuleDirPrefix+"starting")
	require.NoError(t, os.Mkdir(starting, 0o700))
	crashed := filepath.Join(tmp, ModuleDirPrefix+"crashed")
	require.NoError(t, os.Mkdir(crashed, 0o700))
	require.NoError(t, os.Chtimes(crashed, old, old))
	other := filepath.Join(tmp, "elastic-other")
	require.NoError(t, os.Mkdir(other, 0o700))

	assert.Equal(t, 2, SweepModuleDirs(tmp))
	assert.NoDirExists(t, killed.dir, "the killed owner's directory is swept, though its child lives")
	assert.NoDirExists(t, crashed, "a directory never owned, an hour old, is swept")
	assert.FileExists(t, filepath.Join(live.dir, "elastic", "__init__.py"), "a live owner's directory is kept")
	assert.FileExists(t, filepath.Join(live.dir, ownerFile))
	assert.DirExists(t, older, "an older build's directory is kept")
	assert.DirExists(t, starting, "a directory just made is kept")
	assert.DirExists(t, other)
	assert.Equal(t, 0, SweepModuleDirs(tmp), "what is left stays")

	live.stdin.Close()
	require.NoError(t, live.cmd.Wait())
	assert.NoDirExists(t, live.dir, "an owner that ends removes its directory")
}

// A sidecar's store sweeps, as it starts, what the sidecars killed before
// it left, and says so; a live sidecar's directory stays.
func TestAStoreSweepsTheModuleDirsOfKilledSidecarsAsItStarts(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	killed, live := startOwner(t, tmp), startOwner(t, tmp)
	killed.kill(t)

	srv := etcdtest.Start(t)
	var logs proctest.Buffer
	s, err := New(t.Context(), Config{Job: "job", NodeID: "a", Client: srv.Client(t), Listen: "127.0.0.1:0", Host: "127.0.0.1",
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})})
	require.NoError(t, err)
	assert.NoDirExists(t, killed.dir)
	assert.DirExists(t, live.dir)
	assert.Regexp(t, `removed the module directories of sidecars that were killed: .*count=1 `, logs.String())
	own := s.ModuleDir()
	assert.True(t, strings.HasPrefix(own, filepath.Join(tmp, ModuleDirPrefix)), own)
	assert.FileExists(t, filepath.Join(own, "elastic", "__init__.py"))
	assert.Equal(t, 0, SweepModuleDirs(tmp), "the store's own directory is owned")
	s.Close()
	assert.NoDirExists(t, own, "a store that closes removes its directory")
}
