package memckpt

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/membership"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// testNode is a node that runs generation gen with members, under a lease
// it holds while held is true: what the sidecar's Agent answers.
type testNode struct {
	gen     atomic.Int64
	members []membership.Member
	lost    atomic.Bool
}

func (n *testNode) Fence(generation int64) error {
	if n.lost.Load() {
		return assert.AnError
	}
	if g := n.gen.Load(); g != generation {
		return &fenceErr{generation, g}
	}
	return nil
}

type fenceErr struct{ asked, runs int64 }

func (e *fenceErr) Error() string { return "generation is over" }

func (n *testNode) Holds() error {
	if n.lost.Load() {
		return assert.AnError
	}
	return nil
}

func (n *testNode) Members() (int64, []membership.Member) { return n.gen.Load(), n.members }

func members(ids ...string) []membership.Member {
	out := make([]membership.Member, len(ids))
	for i, id := range ids {
		out[i] = membership.Member{Node: id, Role: membership.RoleWorker, Rank: i, Host: "127.0.0.1", Ports: []int{1}, NProc: 1}
	}
	return out
}

// startService starts a store for node id of job, registered in etcd with
// its address as the sidecar's record would be.
func startService(t *testing.T, cli *clientv3.Client, job, id string, n Node, memory int64) *Service {
	t.Helper()
	s, err := New(t.Context(), Config{Job: job, NodeID: id, Client: cli, Memory: memory, Listen: "127.0.0.1:0", Host: "127.0.0.1",
		ModuleDir: t.TempDir()})
	require.NoError(t, err)
	s.Start(n)
	t.Cleanup(s.Close)
	rec := membership.Node{ID: id, Role: membership.RoleWorker, Host: "127.0.0.1", Ports: []int{1}, NProc: 1, MasterPort: 2,
		State: membership.NodeRunning, Checkpoint: s.Addr()}
	val, err := membership.Encode(rec)
	require.NoError(t, err)
	_, err = cli.Put(t.Context(), membership.DefaultKeys().Node(job, id), val)
	require.NoError(t, err)
	return s
}

const python = "/usr/bin/python3"

func requirePython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 is missing: %v", err)
		}
		t.Skipf("python3 is missing: %v", err)
	}
}

// trainer runs a Python script against s's socket as a process of
// generation gen; it returns its output.
func trainer(t *testing.T, s *Service, gen int, script string) string {
	t.Helper()
	cmd := exec.Command(python, "-c", script)
	cmd.Env = append(append(os.Environ(), s.TrainerEnv()...), "PYTHONPATH="+s.ModuleDir(),
		"ELASTIC_GENERATION="+strconv.Itoa(gen), "RANK=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.TrimSpace(string(out))
}

func TestSaveIsFencedReplicatedAndLoadedFromAPeer(t *testing.T) {
	requirePython(t)
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	na := &testNode{members: members("a", "b")}
	nb := &testNode{members: members("a", "b")}
	na.gen.Store(2)
	nb.gen.Store(2)
	a := startService(t, cli, "job", "a", na, 64<<20)
	b := startService(t, cli, "job", "b", nb, 64<<20)

	// A process of generation 1, over on this node, stores nothing.
	out := trainer(t, a, 1, `
import elastic
elastic.save({"x": 1})
try:
    elastic.flush()
    print("stored")
except elastic.FencedError as e:
    print("fenced:", e)
`)
	assert.Equal(t, "fenced: generation is over", out)
	assert.Nil(t, a.store.newest(""))

	// Generation 2's saves are stored, and the newest pushed to b.
	out = trainer(t, a, 2, `
import elastic
for step in range(5):
    elastic.save({"step": step, "blob": bytes(1000)})
elastic.flush()
print(elastic.load()["step"])
`)
	assert.Equal(t, "4", out)
	require.Eventually(t, func() bool {
		c := b.store.newest("a")
		return c != nil && c.Seq == 5
	}, 10*time.Second, time.Millisecond, "the newest save never reached b")

	// A fresh node, which holds nothing, loads its peers' newest.
	c := startService(t, cli, "job", "c", nb, 64<<20)
	out = trainer(t, c, 2, `
import elastic
print(elastic.load()["step"])
`)
	assert.Equal(t, "4", out)
}

func TestAStateTooLargeIsRefusedWithTheBound(t *testing.T) {
	requirePython(t)
	srv := etcdtest.Start(t)
	n := &testNode{}
	n.gen.Store(1)
	s := startService(t, srv.Client(t), "job", "a", n, 2<<20)
	out := trainer(t, s, 1, `
import elastic
elastic.save({"blob": bytes(3 << 20)})
try:
    elastic.flush()
except elastic.TooLargeError as e:
    print(e)
`)
	assert.Contains(t, out, "a state of 3.0MiB does not fit the node's checkpoint memory: a copy may take at most 1MiB, half of its 2MiB")
	assert.Contains(t, out, "--checkpoint-memory")
}

func TestReplicaTrafficNeedsTheJobsSecret(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	n := &testNode{}
	s := startService(t, cli, "job", "a", n, 64<<20)

	secret, err := JobSecret(t.Context(), cli, membership.DefaultKeys(), "job")
	require.NoError(t, err)
	other, err := JobSecret(t.Context(), cli, membership.DefaultKeys(), "other")
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		job    string
		secret []byte
		ok     bool
	}{
		{name: "the job's own", job: "job", secret: secret, ok: true},
		{name: "a wrong secret", job: "job", secret: []byte("0123456789abcdef0123456789abcdef")},
		{name: "another job's", job: "other", secret: other},
		{name: "another job's secret under this job's name", job: "job", secret: other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := newAuth(tc.job, tc.secret)
			require.NoError(t, err)
			conn, err := a.dial(t.Context(), s.Addr())
			if tc.ok {
				require.NoError(t, err)
				conn.Close()
				return
			}
			require.ErrorIs(t, err, ErrUnauthenticated)
		})
	}
	// The secret is the job's, under its prefix, and stays the same.
	again, err := JobSecret(t.Context(), cli, membership.DefaultKeys(), "job")
	require.NoError(t, err)
	assert.Equal(t, secret, again)
	resp, err := cli.Get(t.Context(), membership.DefaultKeys().Job("job")+"secret")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, hex.EncodeToString(secret), string(resp.Kvs[0].Value))
}

func TestASidecarKilledMidReplicaLeavesThePreviousCopy(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	n := &testNode{}
	s := startService(t, cli, "job", "b", n, 64<<20)
	old := []byte("the previous complete copy")
	r, err := s.store.reserve(t.Context(), int64(len(old)))
	require.NoError(t, err)
	s.store.put(&Copy{Meta: Meta{Job: "job", Generation: 8, Seq: 3, Node: "a", Size: int64(len(old)), CRC32: checksum(old)}, Body: old}, r)

	secret, err := JobSecret(t.Context(), cli, membership.DefaultKeys(), "job")
	require.NoError(t, err)
	self, err := os.Executable()
	require.NoError(t, err)
	helper := exec.Command(self)
	helper.Env = append(os.Environ(), "MEMCKPT_HELPER=half-push", "MEMCKPT_JOB=job", "MEMCKPT_PEER="+s.Addr(),
		"MEMCKPT_SECRET="+hex.EncodeToString(secret))
	stdout, err := helper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, helper.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "half sent\n", line)
	require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
	_ = helper.Wait()

	// What b serves to a node that asks is the previous copy, whole.
	a := startService(t, cli, "job", "a", &testNode{}, 64<<20)
	c := a.Load(t.Context())
	require.NotNil(t, c)
	assert.Equal(t, old, c.Body)
	assert.Equal(t, int64(8), c.Generation)
	assert.Equal(t, int64(len(old)), func() int64 { b, _ := s.store.usage(); return b }(), "nothing of the torn copy is held")
}

func TestDiskWritesTheNewestOwnCopyWhileTheLeaseIsHeld(t *testing.T) {
	srv := etcdtest.Start(t)
	n := &testNode{}
	s := startService(t, srv.Client(t), "job", "a", n, 64<<20)
	path := filepath.Join(t.TempDir(), "ckpt", "state.bin")
	put := func(seq int64, body string) {
		r, err := s.store.reserve(t.Context(), int64(len(body)))
		require.NoError(t, err)
		s.store.put(&Copy{Meta: Meta{Job: "job", Generation: 1, Seq: seq, Node: "a", Path: path, Size: int64(len(body)),
			CRC32: checksum([]byte(body))}, Body: []byte(body)}, r)
	}
	put(1, "first")
	s.WriteDisk(context.Background())
	c, err := ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "first", string(c.Body))

	n.lost.Store(true)
	put(2, "second")
	s.WriteDisk(context.Background())
	c, err = ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "first", string(c.Body), "a node without its lease writes nothing")
}

// The sidecar never writes a copy over a file of the job as new or newer:
// one the trainer wrote itself while the sidecar did not answer, or a
// later generation's. Another job's file, or an older one, it replaces.
func TestDiskNeverWritesOverANewerFile(t *testing.T) {
	srv := etcdtest.Start(t)
	s := startService(t, srv.Client(t), "job", "a", &testNode{}, 64<<20)
	path := filepath.Join(t.TempDir(), "state.bin")
	file := func(t *testing.T, job string, gen, seq int64, body string) {
		t.Helper()
		require.NoError(t, os.RemoveAll(path))
		c := Copy{Meta: Meta{Job: job, Generation: gen, Seq: seq, Size: int64(len(body)), CRC32: checksum([]byte(body))}, Body: []byte(body)}
		require.NoError(t, writeFile(path, c, func() error { return nil }))
	}
	put := func(t *testing.T, gen, seq int64, body string) {
		t.Helper()
		r, err := s.store.reserve(t.Context(), int64(len(body)))
		require.NoError(t, err)
		s.store.put(&Copy{Meta: Meta{Job: "job", Generation: gen, Seq: seq, Node: "a", Path: path, Size: int64(len(body)),
			CRC32: checksum([]byte(body))}, Body: []byte(body)}, r)
	}
	onDisk := func(t *testing.T) string {
		t.Helper()
		c, err := ReadFile(path)
		require.NoError(t, err)
		return string(c.Body)
	}
	for _, tc := range []struct {
		name          string
		job           string
		gen, seq      int64
		copyGen, copy int64
		want          string
	}{
		{name: "the trainer's later save", job: "job", gen: 2, seq: 9, copyGen: 2, copy: 5, want: "file"},
		{name: "the same save", job: "job", gen: 2, seq: 5, copyGen: 2, copy: 5, want: "file"},
		{name: "a later generation's", job: "job", gen: 3, seq: 1, copyGen: 2, copy: 5, want: "file"},
		{name: "an older save", job: "job", gen: 2, seq: 4, copyGen: 2, copy: 5, want: "copy"},
		{name: "another job's", job: "other", gen: 9, seq: 9, copyGen: 2, copy: 5, want: "copy"},
		{name: "a standalone trainer's", job: "", gen: 0, seq: 9, copyGen: 2, copy: 5, want: "copy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file(t, tc.job, tc.gen, tc.seq, "file")
			put(t, tc.copyGen, tc.copy, "copy")
			s.written = Meta{}
			s.WriteDisk(t.Context())
			assert.Equal(t, tc.want, onDisk(t))
		})
	}
}

// A save takes the state as it is when save returns, however it is taken
// apart: the fast path (dicts, lists, tuples, tensors, immutable values,
// pickled later in the background) keeps shared objects shared, cycles and
// a state_dict's _metadata; anything else (a namedtuple, a sparse tensor)
// is pickled at once. Standalone, with the file alone.
func TestASaveIsTheStateAsItWasWhenSaveReturned(t *testing.T) {
	requirePython(t)
	cmd := exec.Command(python, "-c", `
import collections, os, sys, tempfile
import torch, numpy
import elastic
m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
o = torch.optim.Adam(m.parameters())
m(torch.randn(5, 4)).sum().backward()
o.step()
shared = [1, 2]
state = {"model": m.state_dict(), "optim": o.state_dict(), "np": numpy.arange(6).reshape(2, 3),
         "t": (1, "a", None, 2.5), "s": shared, "s2": shared, "step": 7}
path = os.path.join(tempfile.mkdtemp(), "ckpt")
elastic.save(state, path)
state["step"] = 8
state["s"].append(3)
state["model"]["0.weight"].add_(1)
elastic.flush()
got = elastic.load(path)
assert got["step"] == 7 and got["s"] == [1, 2], got
assert torch.equal(got["model"]["0.weight"] + 1, m.state_dict()["0.weight"])
assert got["s"] is got["s2"]
assert hasattr(got["model"], "_metadata")
again = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
again.load_state_dict(got["model"])
torch.optim.Adam(again.parameters()).load_state_dict(got["optim"])
assert (got["np"] == numpy.arange(6).reshape(2, 3)).all() and got["t"] == (1, "a", None, 2.5)

P = collections.namedtuple("P", "a b")
elastic.save({"p": P(torch.ones(2), 3), "sparse": torch.eye(2).to_sparse()}, path)
elastic.flush()
got = elastic.load(path)
assert type(got["p"]).__name__ == "P" and torch.equal(got["p"].a, torch.ones(2))
assert torch.equal(got["sparse"].to_dense(), torch.eye(2))

cycle = {"x": torch.zeros(1)}
cycle["self"] = cycle
elastic.save(cycle, path)
elastic.flush()
got = elastic.load(path)
assert got["self"] is got
print("ok")
`)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+moduleDir(t))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "ok", strings.TrimSpace(string(out)))
}

// When the generation's other member cannot take the replica (frozen, cut
// off, gone), a live node of the job outside the generation holds it: the
// newest copy does not wait in one node's memory for that member.
func TestAStandbyTakesTheReplicaWhenNoMemberCan(t *testing.T) {
	requirePython(t)
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	na := &testNode{members: members("a", "b")}
	na.gen.Store(1)
	a := startService(t, cli, "job", "a", na, 64<<20)
	b := startService(t, cli, "job", "b", &testNode{members: members("a", "b")}, 64<<20)
	standby := startService(t, cli, "job", "c", &testNode{}, 64<<20)
	b.Close() // its record stays, as a frozen sidecar's does

	out := trainer(t, a, 1, `
import elastic
for step in range(3):
    elastic.save({"step": step})
elastic.flush()
print("saved")
`)
	assert.Equal(t, "saved", out)
	require.Eventually(t, func() bool {
		c := standby.store.newest("a")
		return c != nil && c.Seq == 3
	}, 10*time.Second, 5*time.Millisecond, "the newest save never reached the standby")
}

// TestAPeerThatIsDownIsLoggedOnce: every save tries the replica's peer
// again; a peer that is down is one warning, not one a save.
func TestAPeerThatIsDownIsLoggedOnce(t *testing.T) {
	requirePython(t)
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	var logs proctest.Buffer
	na := &testNode{members: members("a", "b")}
	na.gen.Store(1)
	a, err := New(t.Context(), Config{Job: "job", NodeID: "a", Client: cli, Memory: 64 << 20, Listen: "127.0.0.1:0", Host: "127.0.0.1",
		ModuleDir: t.TempDir(), Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})})
	require.NoError(t, err)
	a.Start(na)
	t.Cleanup(a.Close)
	b := startService(t, cli, "job", "b", &testNode{members: members("a", "b")}, 64<<20)
	b.Close() // its record stays: every push is refused

	trainer(t, a, 1, `
import elastic, time
for step in range(30):
    elastic.save({"step": step})
    time.sleep(0.01)
elastic.flush()
`)
	assert.Equal(t, 1, strings.Count(logs.String(), "replica not pushed"), "%s", logs.String())
}
