package handover_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/handover"
	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/membership"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// spawn starts a process with extra environment and returns it; it is
// killed and reaped at the end of the test.
func spawn(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd
}

func startOf(t *testing.T, pid int) uint64 {
	t.Helper()
	p, ok := guard.ReadProc(pid)
	require.True(t, ok)
	return p.Start
}

func here(t *testing.T) handover.State {
	t.Helper()
	s, err := handover.Self()
	require.NoError(t, err)
	s.Cluster, s.Prefix, s.Job, s.Node, s.TTLSeconds = 7, "/elastic/", "j", "j-0", 3
	return s
}

func TestTheLockKeepsOneSidecarPerNode(t *testing.T) {
	dir := t.TempDir()
	a, err := handover.Open(dir, "j_j-0")
	require.NoError(t, err)
	self := here(t)
	self.Lease = 5
	k := handover.NewKeeper(a, self, nil)

	_, err = handover.Open(dir, "j_j-0")
	require.ErrorIs(t, err, handover.ErrHeld)
	assert.Contains(t, err.Error(), "pid "+strconv.Itoa(os.Getpid()), "names the sidecar that runs")
	other, err := handover.Open(dir, "j_j-1")
	require.NoError(t, err, "another node has a state of its own")
	other.Close()

	k.Close(false)
	b, err := handover.Open(dir, "j_j-0")
	require.NoError(t, err, "free once the holder is gone")
	prev, ok, err := b.Previous()
	require.NoError(t, err)
	require.True(t, ok, "the file stays for the successor")
	assert.Equal(t, int64(5), prev.Lease)
	handover.NewKeeper(b, self, nil).Close(true)
	_, err = os.Stat(b.Path())
	assert.ErrorIs(t, err, os.ErrNotExist, "a sidecar that ends normally leaves no state")
	_, err = os.Stat(filepath.Join(dir, "j_j-0.lock"))
	assert.ErrorIs(t, err, os.ErrNotExist, "nor its lock")
	c, err := handover.Open(dir, "j_j-0")
	require.NoError(t, err, "a lock removed by its holder is taken anew")
	c.Close()
	assert.NotEqual(t, handover.Name(1, "/elastic/", "j", "j-0"), handover.Name(2, "/elastic/", "j", "j-0"), "another cluster's node is another node")
	assert.NotEqual(t, handover.Name(1, "/elastic/", "j", "j-0"), handover.Name(1, "/other/", "j", "j-0"))
}

func TestAStateFileWithBadContentsIsIgnored(t *testing.T) {
	dir := t.TempDir()
	for _, data := range []string{"", "{", `{"version":1}`, "\x00\xff", validState[:40]} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "j_j-0.json"), []byte(data), 0o600))
		s, err := handover.Open(dir, "j_j-0")
		require.NoError(t, err)
		_, ok, err := s.Previous()
		assert.False(t, ok)
		require.ErrorIs(t, err, handover.ErrInvalidState, "%q", data)
		assert.NotContains(t, err.Error(), "\n")
		s.Close()
	}
}

func TestAssess(t *testing.T) {
	self := here(t)
	live := spawn(t, nil, "sleep", "100")
	dead := exec.Command("true")
	require.NoError(t, dead.Start())
	deadStart := startOf(t, dead.Process.Pid)
	require.NoError(t, dead.Wait())

	prev := self
	prev.Pid, prev.Start, prev.Lease = dead.Process.Pid, deadStart, 42
	for _, tc := range []struct {
		name    string
		change  func(*handover.State)
		verdict string // "" takes back; "running" refuses; else ignored
	}{
		{"a predecessor that exited", func(*handover.State) {}, ""},
		{"its pid reused by another process", func(s *handover.State) { s.Pid, s.Start = live.Process.Pid, startOf(t, live.Process.Pid)+1 }, ""},
		{"a predecessor still running", func(s *handover.State) { s.Pid, s.Start = live.Process.Pid, startOf(t, live.Process.Pid) }, "running"},
		{"another job's", func(s *handover.State) { s.Job = "k" }, "job k"},
		{"another node's", func(s *handover.State) { s.Node = "j-1" }, "node j-1"},
		{"another etcd's", func(s *handover.State) { s.Cluster = 8 }, "another etcd"},
		{"another prefix's", func(s *handover.State) { s.Prefix = "/other/" }, "another etcd"},
		{"another boot's", func(s *handover.State) { s.Boot = "x" }, "booted"},
		{"one that never registered", func(s *handover.State) { s.Lease = 0 }, "never registered"},
		{"this sidecar's own", func(s *handover.State) { s.Pid, s.Start = self.Pid, self.Start }, "own"},
		{"of a pid namespace out of sight", func(s *handover.State) { s.PidNS = "pid:[1]" }, "another pid namespace"},
		{"of a container's entrypoint, whose namespace died with it", func(s *handover.State) { s.PidNS, s.Pid = "pid:[1]", 1 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := prev
			tc.change(&p)
			err := handover.Assess(p, self)
			switch tc.verdict {
			case "":
				assert.NoError(t, err)
			case "running":
				require.ErrorIs(t, err, handover.ErrPredecessorRunning)
				assert.Contains(t, err.Error(), "pid "+strconv.Itoa(live.Process.Pid))
			default:
				require.Error(t, err)
				assert.NotErrorIs(t, err, handover.ErrPredecessorRunning)
				assert.Contains(t, err.Error(), tc.verdict)
			}
		})
	}
}

func TestTakeBackKillsTheGuardsProcessesBeforeItRevokes(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()
	// The predecessor's lease and record, as it left them when it died.
	lease, err := cli.Grant(t.Context(), 30)
	require.NoError(t, err)
	_, err = cli.Put(t.Context(), keys.Node("j", "j-0"), "{}", clientv3.WithLease(lease.ID))
	require.NoError(t, err)

	// A predecessor's guard: a process with trainers below it, one of
	// them frozen, and one that left the tree but carries the marker.
	marker := "0123abcd"
	env := []string{guard.EnvGuardID + "=" + marker}
	g := spawn(t, nil, "sh", "-c", "ELASTIC_GUARD_ID="+marker+" sleep 100 & ELASTIC_GUARD_ID="+marker+" sleep 100 & wait")
	stray := spawn(t, env, "sleep", "100")
	var below []int
	require.Eventually(t, func() bool {
		below = guard.Descendants(g.Process.Pid)
		return len(below) == 2
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, syscall.Kill(below[0], syscall.SIGSTOP))

	self := here(t)
	prev := self
	prev.Pid, prev.Start, prev.PidNS = 999999, 1, self.PidNS
	prev.Lease = int64(lease.ID)
	prev.Guard = &handover.Guard{Pid: g.Process.Pid, Start: startOf(t, g.Process.Pid), Marker: marker}
	require.NoError(t, handover.Assess(prev, self))
	require.NoError(t, handover.TakeBack(t.Context(), cli, keys, prev, self))

	for _, pid := range append(below, g.Process.Pid, stray.Process.Pid) {
		p, ok := guard.ReadProc(pid)
		assert.False(t, ok && p.Running(), "pid %d can still run", pid)
	}
	assert.Empty(t, proctest.Marked(guard.EnvGuardID+"="+marker))
	resp, err := cli.Get(t.Context(), keys.Node("j", "j-0"))
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs, "the node's record went with the revoked lease")
	resp, err = cli.Get(t.Context(), keys.Takeover("j", "j-0", prev.Lease))
	require.NoError(t, err)
	assert.Len(t, resp.Kvs, 1)
	tl, err := cli.TimeToLive(t.Context(), clientv3.LeaseID(prev.Lease))
	require.NoError(t, err)
	assert.Equal(t, int64(-1), tl.TTL)
}
