package memckpt

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/sidecar"
)

// endingGeneration is the generation an endingNode runs until it ends.
const endingGeneration = 3

// endingNode runs endingGeneration until ended, then none, and refuses as
// the sidecar's Agent does.
type endingNode struct{ ended atomic.Bool }

func (n *endingNode) Fence(generation int64) error {
	if n.ended.Load() || generation != endingGeneration {
		return fmt.Errorf("%w: generation %d is over; this node runs none", sidecar.ErrFenced, generation)
	}
	return nil
}

func (n *endingNode) Holds() error { return nil }

func (n *endingNode) Members() (int64, []membership.Member) { return endingGeneration, members("a") }

// endingTrainer saves a step at a time; after step 3, stored, it says so
// and waits for a line (the generation ends meanwhile), then goes on
// saving, as a training loop does, until something stops it.
const endingTrainer = `import sys, time
import elastic
step = 0
while True:
    elastic.save({"step": step, "weights": bytes(1 << 12)})
    if step == 3:
        elastic.flush()
        print("stored 3", flush=True)
        sys.stdin.readline()
    step += 1
    time.sleep(0.005)
`

// endingProc is a trainer of an endingNode's generation.
type endingProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Scanner
	stderr *proctest.Buffer
}

// startEnding starts script as a process of generation gen (none if 0)
// under s: cold (python -c), or warm, through the guard's bootstrap with
// elastic preloaded before the generation's environment exists.
func startEnding(t *testing.T, s *Service, gen int, warm bool, script string) *endingProc {
	t.Helper()
	env := append(s.TrainerEnv(), "RANK=0")
	if gen > 0 {
		env = append(env, "ELASTIC_GENERATION="+strconv.Itoa(gen))
	}
	p := &endingProc{stderr: &proctest.Buffer{}}
	if warm {
		bootstrap, err := os.ReadFile("../guard/warm.py")
		require.NoError(t, err)
		work := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(work, "train.py"), []byte(script), 0o644))
		goR, goW, err := os.Pipe()
		require.NoError(t, err)
		defer goW.Close()
		readyR, readyW, err := os.Pipe()
		require.NoError(t, err)
		defer readyR.Close()
		p.cmd = exec.Command(python, "-c", string(bootstrap), work, "elastic")
		p.cmd.Env = pyEnv(s.ModuleDir())
		p.cmd.ExtraFiles = []*os.File{goR, readyW}
		defer goR.Close()
		defer readyW.Close()
		p.start(t)
		goR.Close()
		readyW.Close()
		_, err = readyR.Read(make([]byte, 1))
		require.NoError(t, err, "the warm interpreter never got ready: %s", p.stderr)
		vars := map[string]string{}
		for _, kv := range pyEnv(s.ModuleDir(), env...) {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
		msg, err := json.Marshal(map[string]any{"env": vars, "cwd": work, "argv": []string{"train.py"}, "script": "train.py"})
		require.NoError(t, err)
		_, err = goW.Write(msg)
		require.NoError(t, err)
		require.NoError(t, goW.Close())
		return p
	}
	p.cmd = exec.Command(python, "-c", script)
	p.cmd.Env = pyEnv(s.ModuleDir(), env...)
	p.start(t)
	return p
}

func (p *endingProc) start(t *testing.T) {
	t.Helper()
	p.cmd.Stderr = p.stderr
	var err error
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	p.stdout = bufio.NewScanner(stdout)
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	})
}

// expect reads its output until line.
func (p *endingProc) expect(t *testing.T, line string) {
	t.Helper()
	for p.stdout.Scan() {
		if p.stdout.Text() == line {
			return
		}
	}
	t.Fatalf("no line %q; stderr:\n%s", line, p.stderr)
}

// exit waits for the process's end after the rest of its output.
func (p *endingProc) exit() *os.ProcessState {
	for p.stdout.Scan() {
	}
	_ = p.cmd.Wait()
	return p.cmd.ProcessState
}

// overLine is the one line a trainer's end of generation says.
var overLine = regexp.MustCompile(`^\[elastic\] rank 0: generation 3 is over \(this node runs none\): the save of step (\d+) was not stored; this process is stopping\n$`)

// A save refused because the process's generation is over ends the
// process with one line, not a traceback, cold or warm alike: the
// generation's end is expected; its sidecar is stopping it. It exits 1 as
// on any uncaught exception, which its sidecar, stopping the generation,
// does not read.
func TestAGenerationsEndIsOneLineNotATraceback(t *testing.T) {
	requirePython(t)
	srv := etcdtest.Start(t)
	for _, warm := range []bool{false, true} {
		t.Run(map[bool]string{false: "cold", true: "warm"}[warm], func(t *testing.T) {
			node := &endingNode{}
			s := startService(t, srv.Client(t), "job", "a", node, 64<<20)
			p := startEnding(t, s, endingGeneration, warm, endingTrainer)
			p.expect(t, "stored 3")
			node.ended.Store(true)
			_, err := io.WriteString(p.stdin, "\n")
			require.NoError(t, err)
			st := p.exit()
			assert.Equal(t, 1, st.ExitCode(), "stderr:\n%s", p.stderr)
			m := overLine.FindStringSubmatch(p.stderr.String())
			require.NotNil(t, m, "stderr:\n%s", p.stderr)
			step, _ := strconv.Atoi(m[1])
			assert.GreaterOrEqual(t, step, 4, "steps up to 3 were stored")
		})
	}
}

// A stop's SIGTERM with a save refused on its way says the same line,
// once, and the process still ends by SIGTERM.
func TestAGenerationsEndAtSIGTERMIsOneLine(t *testing.T) {
	requirePython(t)
	srv := etcdtest.Start(t)
	node := &endingNode{}
	s := startService(t, srv.Client(t), "job", "a", node, 64<<20)
	p := startEnding(t, s, endingGeneration, false, `import sys, time
import elastic
elastic.save({"step": 3})
elastic.flush()
print("stored 3", flush=True)
sys.stdin.readline()
elastic.save({"step": 4})
print("saving 4", flush=True)
time.sleep(3600)
`)
	p.expect(t, "stored 3")
	node.ended.Store(true)
	_, err := io.WriteString(p.stdin, "\n")
	require.NoError(t, err)
	p.expect(t, "saving 4")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	st := p.exit()
	ws, ok := st.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	assert.Equal(t, syscall.SIGTERM, ws.Signal(), "stderr:\n%s", p.stderr)
	m := overLine.FindStringSubmatch(p.stderr.String())
	require.NotNil(t, m, "stderr:\n%s", p.stderr)
	assert.Equal(t, "4", m[1])
}

// A process of no generation (one the user started beside the job, with
// the store's socket) is refused too, but that is no generation's end: it
// is an exception the user acts on, with its traceback and one-line
// message.
func TestAFencedErrorOutsideAGenerationStaysAnException(t *testing.T) {
	requirePython(t)
	srv := etcdtest.Start(t)
	s := startService(t, srv.Client(t), "job", "a", &endingNode{}, 64<<20)
	p := startEnding(t, s, 0, false, `import elastic
elastic.save({"step": 1})
elastic.flush()
`)
	st := p.exit()
	assert.Equal(t, 1, st.ExitCode())
	out := p.stderr.String()
	assert.True(t, strings.HasPrefix(out, "Traceback (most recent call last):\n"), "stderr:\n%s", out)
	assert.True(t, strings.HasSuffix(out, "\nelastic.FencedError: sidecar: fenced: generation 0 is over; this node runs none\n"), "stderr:\n%s", out)
}
