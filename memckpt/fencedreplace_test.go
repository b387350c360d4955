package memckpt

import (
	"bufio"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fenceServer answers each request on an abstract unix socket with answer,
// and records the requests.
type fenceServer struct {
	name     string
	mu       sync.Mutex
	requests []string
}

func serveFence(t *testing.T, answer string) *fenceServer {
	t.Helper()
	f := &fenceServer{name: "@elastic-test-fence-" + filepath.Base(t.TempDir())}
	l, err := net.Listen("unix", f.name)
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(conn).ReadString('\n')
			f.mu.Lock()
			f.requests = append(f.requests, strings.TrimSpace(line))
			f.mu.Unlock()
			if answer != "" {
				_, _ = conn.Write([]byte(answer + "\n"))
			}
			conn.Close()
		}
	}()
	return f
}

func (f *fenceServer) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// elastic.fenced_replace asks the fence watchdog, or the guard when the
// watchdog cannot be reached, and raises FencedError on a refusal, as the
// Go client does.
func TestFencedReplaceAsksTheWatchdogThenTheGuard(t *testing.T) {
	requirePython(t)
	refusing := serveFence(t, "refused: the lease deadline has passed")
	ok := serveFence(t, "ok")
	silent := serveFence(t, "")
	failing := serveFence(t, "error: rename needs absolute paths")
	dir := t.TempDir()
	// Each case: the watchdog's socket, the guard's, a line per case.
	cmd := exec.Command(python, "-c", `
import os, sys, elastic
for watchdog, guard in zip(sys.argv[1::2], sys.argv[2::2]):
    os.environ["ELASTIC_WATCHDOG_SOCKET"], os.environ["ELASTIC_FENCE_SOCKET"] = watchdog, guard
    open("a", "w").close()
    try:
        elastic.fenced_replace("a", "b")
        print("ok")
    except elastic.FencedError as e:
        print("fenced:", e)
    except elastic.CheckpointError as e:
        print("error:", e)
`,
		"", "", // outside a sidecar
		refusing.name, ok.name,
		"@elastic-test-fence-nobody", ok.name,
		"", silent.name,
		"", failing.name)
	cmd.Dir = dir
	cmd.Env = pyEnv(moduleDir(t), "ELASTIC_GENERATION=4")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, []string{
		"ok",
		"fenced: the lease deadline has passed", // the watchdog's answer stands
		"ok",                                    // no watchdog there: the guard's
		"fenced: the guard did not answer",      // closed without an answer: going away
		"error: rename needs absolute paths",    // an error is not a refusal
	}, strings.Split(strings.TrimSpace(string(out)), "\n"))
	require.Len(t, refusing.asked(), 1)
	assert.Equal(t, `{"op": "rename", "generation": 4, "src": "`+dir+`/a", "dst": "`+dir+`/b"}`, refusing.asked()[0])
	assert.Len(t, ok.asked(), 1, "the guard was asked once: when the watchdog could not be reached")
}
