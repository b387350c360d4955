package memckpt

import (
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
    m, _ = elastic._read_file_meta(path)
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
