package integration

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/memckpt"
)

// checkpointTrainer saves to the sidecar's memory with elastic.py, and
// logs what it loads and what the store answers to CKPT_DIR/log. Rank 0
// of generation 1 saves once more after its stop came, in its grace
// period: a rank quiet for a second when a stop comes is taken for
// blocked and killed without one, so it waits for the stop inside a
// declared quiet phase.
const checkpointTrainer = `
import os, signal, sys, time
import torch, elastic
gen, rank, d = int(os.environ["ELASTIC_GENERATION"]), int(os.environ["RANK"]), os.environ["CKPT_DIR"]
def log(*a):
    with open(os.path.join(d, "log"), "a") as f:
        f.write(" ".join(str(x) for x in a) + "\n")
def wait_for(name):
    while not os.path.exists(os.path.join(d, name)):
        time.sleep(0.01)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
st = elastic.load()
step = -1 if st is None else st["step"]
log("load", gen, rank, step, -1 if st is None else int(st["w"].sum()))
open(os.path.join(d, "loaded-%d-%d" % (gen, rank)), "w").close()
w = torch.zeros(1000) if st is None else st["w"]
if gen == 1 and rank == 1:
    wait_for("saved1")
    sys.exit(3)
if gen == 1:
    for step in range(10):
        w += 1
        elastic.save({"w": w, "step": step})
    elastic.flush()
    open(os.path.join(d, "saved1"), "w").close()
    # It waits for the stop, as a rank waits in a long phase: declared, so
    # that however long the stop takes to come (a loaded machine), it is
    # not taken for a rank blocked in a collective and killed at once,
    # but given its grace period.
    with elastic.quiet(120):
        while not stop:
            time.sleep(0.01)
    # Generation 1 is over: whatever this process saves is refused.
    try:
        elastic.save({"w": w, "step": 100})
        elastic.flush()
        log("stale stored")
    except elastic.FencedError as e:
        log("fenced", e)
    sys.exit(0)
if gen == 2 and rank == 0:
    wait_for("loaded-2-1")  # both load the same copy
    for step in range(step + 1, step + 11):
        w += 1
        elastic.save({"w": w, "step": step})
    elastic.flush()
    open(os.path.join(d, "saved2"), "w").close()
if gen == 2:
    while True:
        time.sleep(1)
`

func TestMemoryCheckpointsSurviveTrainersAndNodes(t *testing.T) {
	requireTorch(t)
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "train.py")
	require.NoError(t, os.WriteFile(script, []byte(checkpointTrainer), 0o644))
	r := startRun(t, []string{"--np", "2", "--job", "ckpt", "--ttl", "2s", "--grace-period", "5s"}, []string{python, script}, "CKPT_DIR="+dir)
	logLines := func(prefix string) []string {
		data, _ := os.ReadFile(filepath.Join(dir, "log"))
		var out []string
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, prefix) {
				out = append(out, l)
			}
		}
		return out
	}
	waitLines := func(prefix string, n int) []string {
		t.Helper()
		require.Eventually(t, func() bool { return len(logLines(prefix)) >= n }, 90*time.Second, 10*time.Millisecond,
			"never %d lines %q; log:\n%s", n, prefix, strings.Join(logLines(""), "\n"))
		return logLines(prefix)
	}

	// Generation 1 ends when rank 1 fails; rank 0, still running in its
	// grace period, saves again and is refused.
	fenced := waitLines("fenced ", 1)
	assert.Contains(t, fenced[0], "generation 1 is over")
	assert.Empty(t, logLines("stale stored"))

	// Both new trainers load the last save of generation 1, from memory.
	assert.ElementsMatch(t, []string{"load 2 0 9 10000", "load 2 1 9 10000"}, waitLines("load 2 ", 2))

	// Once node default-1 holds generation 2's newest save as a replica,
	// node default-0 is killed whole: its memory is gone, and generation
	// 3 loads from the replica.
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "saved2")); return err == nil },
		60*time.Second, 10*time.Millisecond)
	secret := mustGetClient(t, r, membership.DefaultKeys().Secret("ckpt"))
	resp, err := r.cli.Get(t.Context(), membership.DefaultKeys().Node("ckpt", "ckpt-1"))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	peer, err := membership.DecodeNode(resp.Kvs[0].Value)
	require.NoError(t, err)
	require.NotEmpty(t, peer.Checkpoint, "a node advertises its checkpoint address")
	require.Eventually(t, func() bool {
		m, err := memckpt.PeerNewest(t.Context(), "ckpt", mustHex(t, secret), peer.Checkpoint)
		return err == nil && m != nil && m.Generation == 2 && m.Seq == 10
	}, 30*time.Second, 10*time.Millisecond, "the replica never reached node ckpt-1")
	require.NoError(t, syscall.Kill(r.sidecarPid("ckpt-0"), syscall.SIGKILL))

	assert.ElementsMatch(t, []string{"load 3 0 19 20000", "load 3 1 19 20000"}, waitLines("load 3 ", 2))
}

func mustHex(t *testing.T, b []byte) []byte {
	out, err := hex.DecodeString(string(b))
	require.NoError(t, err)
	return out
}

func mustGetClient(t *testing.T, r *localRun, key string) []byte {
	resp, err := r.cli.Get(t.Context(), key)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	return resp.Kvs[0].Value
}

// The snippet of docs/frameworks.md that resumes with elastic.load runs as
// written outside a sidecar, with the module `coordinator python-module`
// writes: a first run starts at step 0, the next resumes after the last
// step the first saved.
func TestTheElasticSnippetRunsOnItsOwn(t *testing.T) {
	t.Parallel()
	doc := mustRead(t, filepath.Join(repoRoot, "docs", "frameworks.md"))
	_, rest, ok := strings.Cut(doc, "### Checkpoints in memory: `import elastic`")
	require.True(t, ok)
	_, rest, ok = strings.Cut(rest, "```python\n")
	require.True(t, ok)
	snippet, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)

	moduleDir, work := t.TempDir(), t.TempDir()
	code, stdout, stderr := cli(t, nil, "python-module", moduleDir)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "PYTHONPATH="+moduleDir)
	// What the snippet leaves to the user: a model, its optimizer, a step.
	script := `import os, torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
steps, rank = int(os.environ["STEPS"]), 0
def train_one_step():
    optimizer.zero_grad()
    model(torch.ones(4)).sum().backward()
    optimizer.step()
` + snippet + `print("started at", start)
`
	require.NoError(t, os.WriteFile(filepath.Join(work, "train.py"), []byte(script), 0o644))
	for _, run := range []struct{ steps, start string }{{"5", "0"}, {"8", "5"}} {
		py := exec.Command("/usr/bin/python3", "train.py")
		py.Dir = work
		py.Env = append(os.Environ(), "PYTHONPATH="+moduleDir, "STEPS="+run.steps)
		out, err := py.CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Equal(t, "started at "+run.start+"\n", string(out))
	}
}

// livesTrainer counts steps in a memory checkpoint saved with a path, one
// node, and logs each load to CKPT_DIR/log as "LIFE load GENERATION STEP".
// It saves up to UNTIL and ends; in the life FAIL names, its first
// generation fails once it has saved, so that the next one loads.
const livesTrainer = `
import os, sys, elastic
gen, d, life = int(os.environ["ELASTIC_GENERATION"]), os.environ["CKPT_DIR"], os.environ["LIFE"]
path = os.path.join(d, "state.ckpt")
st = elastic.load(path=path)
step = 0 if st is None else st["step"]
with open(os.path.join(d, "log"), "a") as f:
    f.write("%s load %d %d\n" % (life, gen, step))
until = int(os.environ["UNTIL"]) if gen == 1 else int(os.environ["UNTIL"]) + 20
while step < until:
    step += 1
    elastic.save({"step": step}, path=path)
elastic.flush()
sys.exit(3 if life == os.environ["FAIL"] and gen == 1 else 0)
`

// A job run again with the same checkpoint path is a new life of the job:
// its generations count from 1 again. It resumes from the file the first
// life left, and from then on what it trains itself is newer than that
// file. The file's generation and sequence used to outrank the new life's
// first ones, so every restart went back to the file.
func TestARunStartedAgainResumesFromTheFileOnceAndThenFromWhatItTrained(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "train.py")
	require.NoError(t, os.WriteFile(script, []byte(livesTrainer), 0o644))
	life := func(name, until string) {
		t.Helper()
		r := startRun(t, []string{"--np", "1", "--job", "lives"}, []string{python, script},
			"CKPT_DIR="+dir, "LIFE="+name, "UNTIL="+until, "FAIL=second")
		require.Zero(t, r.wait(), "run %s: %s", name, r.out.String())
	}
	life("first", "50")  // saves steps 1 to 50 and succeeds
	life("second", "80") // loads 50, saves to 80 and fails; its generation 2 goes on to 100
	life("third", "120")

	data, err := os.ReadFile(filepath.Join(dir, "log"))
	require.NoError(t, err)
	assert.Equal(t, []string{
		"first load 1 0",
		"second load 1 50", // the first life's file
		"second load 2 80", // its own save, not the older life's file
		"third load 1 100", // the file the second life left
	}, strings.Split(strings.TrimSpace(string(data)), "\n"))
}
