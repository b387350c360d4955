package memckpt

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
)

// stallNode is a testNode whose fence does not answer while it is stalled:
// the store takes no save, as if the sidecar were frozen.
type stallNode struct {
	*testNode
	mu      sync.Mutex
	stalled chan struct{} // closed to go on; nil when not stalled
}

func (n *stallNode) stall() {
	n.mu.Lock()
	n.stalled = make(chan struct{})
	n.mu.Unlock()
}

func (n *stallNode) resume() {
	n.mu.Lock()
	if n.stalled != nil {
		close(n.stalled)
		n.stalled = nil
	}
	n.mu.Unlock()
}

func (n *stallNode) Fence(generation int64) error {
	n.mu.Lock()
	stalled := n.stalled
	n.mu.Unlock()
	if stalled != nil {
		<-stalled
	}
	return n.testNode.Fence(generation)
}

// A save with a path that the sidecar does not take within a second goes
// to its file, written by the trainer; later ones go there at once, until
// the sidecar answers again, when saves go to it again. A save without a
// path waits for the sidecar.
func TestASaveTheSidecarDoesNotTakeGoesToItsFile(t *testing.T) {
	requirePython(t)
	srv := etcdtest.Start(t)
	n := &stallNode{testNode: &testNode{}}
	n.gen.Store(1)
	s := startService(t, srv.Client(t), "job", "a", n, 64<<20)
	t.Cleanup(n.resume) // before the service closes
	path := filepath.Join(t.TempDir(), "ckpt", "state.bin")

	n.stall()
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		// Once the third save is in the file.
		assert.Eventually(t, func() bool {
			m, err := readFileMeta(path)
			return err == nil && m.Seq >= 3
		}, 30*time.Second, 5*time.Millisecond)
		n.resume()
	}()
	out := trainer(t, s, 1, `
import time, elastic
path = `+strconv.Quote(path)+`
def timed(step, p=path):
    t = time.monotonic()
    elastic.save({"step": step}, p)
    elastic.flush()
    m, _ = elastic.checkpoint._read_file_meta(path)
    return time.monotonic() - t, m["seq"] if m else None

took, seq = timed(0)
print("first", took >= 0.9, took < 5, seq)          # waited for the sidecar a second, then the file
took, seq = timed(1)
print("second", took < 0.9, seq)                    # at once to the file
took, seq = timed(2)
print("third", took < 0.9, seq)
for step in range(3, 300):                          # the sidecar answers again
    took, seq = timed(step)
    if seq < step + 1:
        print("sidecar", step)
        break
    time.sleep(0.02)
took, _ = timed(1000, None)
print("no path", took < 0.9)
`)
	<-resumed
	lines := strings.Split(out, "\n")
	require.Len(t, lines, 5, out)
	assert.Equal(t, "first True True 1", lines[0])
	assert.Equal(t, "second True 2", lines[1])
	assert.Equal(t, "third True 3", lines[2])
	require.True(t, strings.HasPrefix(lines[3], "sidecar "), out)
	assert.Equal(t, "no path True", lines[4])
	c := s.store.newest("a")
	require.NotNil(t, c)
	assert.Empty(t, c.Path, "the newest copy in the sidecar is the last save, without a path")
}

// A trainer stopped with SIGTERM (a restart, a suspension) while its last
// save is still being sent stores it before it ends, and still ends by
// SIGTERM; one with a SIGTERM handler of its own keeps it.
func TestSIGTERMStoresTheSaveInFlightFirst(t *testing.T) {
	requirePython(t)
	for _, own := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "own handler"}[own], func(t *testing.T) {
			srv := etcdtest.Start(t)
			n := &stallNode{testNode: &testNode{}}
			n.gen.Store(1)
			s := startService(t, srv.Client(t), "job", "a", n, 64<<20)
			t.Cleanup(n.resume)
			script := `
import os, signal, sys, elastic
if ` + map[bool]string{false: "False", true: "True"}[own] + `:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(7))
path = sys.argv[1]
elastic.save({"step": 1}, path)
elastic.flush()
print("stored", flush=True)
sys.stdin.readline()            # the sidecar stalls
elastic.save({"step": 2}, path) # in flight: it takes no save
print("saved", flush=True)
signal.pause()
`
			cmd := exec.Command(python, "-c", script, filepath.Join(t.TempDir(), "ckpt"))
			cmd.Env = append(append(os.Environ(), s.TrainerEnv()...), "PYTHONPATH="+s.ModuleDir(), "ELASTIC_GENERATION=1", "RANK=0")
			stdin, err := cmd.StdinPipe()
			require.NoError(t, err)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			out := bufio.NewReader(stdout)
			line, err := out.ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "stored\n", line)
			n.stall()
			_, err = stdin.Write([]byte("\n"))
			require.NoError(t, err)
			line, err = out.ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "saved\n", line)
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			time.Sleep(200 * time.Millisecond) // the sidecar answers again, late
			n.resume()
			err = cmd.Wait()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			c := s.store.newest("a")
			require.NotNil(t, c, "stderr: %s", &stderr)
			if own {
				assert.Equal(t, 7, exit.ExitCode(), "the trainer's own handler ran")
				assert.Equal(t, int64(1), c.Seq, "and nothing was waited for")
				return
			}
			assert.Equal(t, syscall.SIGTERM, exit.Sys().(syscall.WaitStatus).Signal(), "it still ends by SIGTERM")
			assert.Equal(t, int64(2), c.Seq, "the save in flight was stored first")
		})
	}
}
