package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/membership"
)

// These tests hold the product's promise against faults a node suffers, with
// real processes: generation g+1's processes start only after every process
// of generation g is gone. The fence trainer logs heartbeats; overlaps()
// finds any sign of life of a generation after the next one started.

// waitGone waits until every trainer of generation gen has exited.
func (c *jobCluster) waitGone(gen int) {
	c.t.Helper()
	for _, s := range startsOfGen(readBeats(c.t, c.log), gen) {
		require.Eventually(c.t, func() bool { return !proctest.Alive(s.pid) }, 60*time.Second, 10*time.Millisecond,
			"trainer %d of generation %d never exited", s.pid, gen)
	}
}

// A training command that runs its trainer without exec (bash train.sh
// running python) exits on SIGTERM before the trainer does. The stop is
// acked only when the trainer is gone too.
func TestAStopWaitsForTheTrainerBelowAWrapper(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "wrap")
	c.serve()
	// The trainer outlasts its wrapper by more than the 2 s a process's
	// output may keep it unreaped.
	env := []string{"FT_NESTED=1", "FT_TERM_DELAY=4"}
	for i := range 2 {
		c.sidecar(fmt.Sprintf("n%d", i), env, "--np", "2")
	}
	c.running(1, 2)
	c.waitStarts(1, 2)

	_, err := c.client.Scale(t.Context(), c.job, membership.FixedNP(1))
	require.NoError(t, err)
	c.running(2, 1)
	c.waitStarts(2, 1)
	c.waitGone(1)
	requireNoOverlap(t, c.log)
}

// A sidecar killed with SIGKILL takes its trainers with it, including one
// that its training command started without exec.
func TestASidecarKilledTakesItsWholeTreeWithIt(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "killed")
	c.serve()
	env := []string{"FT_NESTED=1", "FT_SETSID=1"}
	var nodes []*clusterNode
	for i := range 3 {
		nodes = append(nodes, c.sidecar(fmt.Sprintf("n%d", i), env, "--np", "2:3", "--ttl", "2s"))
	}
	c.running(1, 3)
	c.waitStarts(1, 3)

	require.NoError(t, nodes[1].proc.cmd.Process.Kill())
	c.running(2, 2)
	c.waitStarts(2, 2)
	c.waitGone(1)
	requireNoOverlap(t, c.log)
}

// A sidecar frozen with SIGSTOP cannot stop anything, while its lease runs
// out: its trainers die before the lease can expire.
func TestAFrozenSidecarsTrainerDiesBeforeItsLeaseExpires(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "frozen")
	c.serve()
	var nodes []*clusterNode
	for i := range 3 {
		nodes = append(nodes, c.sidecar(fmt.Sprintf("n%d", i), nil, "--np", "2:3", "--ttl", "2s"))
	}
	c.running(1, 3)
	c.waitStarts(1, 3)

	expired := c.watchDelete(membership.DefaultKeys().Node(c.job, "n1"))
	below := map[int]bool{}
	for _, pid := range guard.Descendants(nodes[1].proc.cmd.Process.Pid) {
		below[pid] = true
	}
	freezePid(t, nodes[1].proc.cmd.Process.Pid)
	c.running(2, 2)
	c.waitStarts(2, 2)
	c.waitGone(1)
	requireNoOverlap(t, c.log)
	at := <-expired
	for _, b := range readBeats(t, c.log) {
		if below[b.pid] && b.micros >= at.UnixMicro() {
			t.Errorf("generation 1 rank %d (pid %d) alive %s after etcd expired its node's lease", b.rank, b.pid,
				time.Duration(b.micros-at.UnixMicro())*time.Microsecond)
		}
	}

	// Thawed, the node registers again and the job grows back.
	require.NoError(t, sigcont(nodes[1].proc.cmd.Process.Pid))
	c.running(3, 3)
	requireNoOverlap(t, c.log)
}

// A node that does not ack a stop in time is evicted: its lease is revoked
// while its trainer still stops gracefully. The next generation, which a
// standby node can start at once, waits until the evicted nodes have
// certainly fenced themselves.
func TestAnEvictedNodeIsNotTakenForStopped(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "evicted")
	c.serve("--stop-timeout", "1s")
	env := []string{"FT_TERM_DELAY=10"}
	for i := range 2 {
		c.sidecar(fmt.Sprintf("n%d", i), env, "--np", "2", "--ttl", "2s", "--grace-period", "30s")
	}
	c.running(1, 2)
	c.waitStarts(1, 2)
	c.sidecar("n2", nil, "--ttl", "2s") // on standby
	c.status("saw the standby node", func(s membership.Status) bool { return true })
	require.Eventually(t, func() bool {
		nodes, err := c.client.Nodes(t.Context(), c.job)
		return err == nil && len(nodes) == 3
	}, 30*time.Second, 10*time.Millisecond)

	_, err := c.client.Scale(t.Context(), c.job, membership.FixedNP(1))
	require.NoError(t, err)
	c.running(2, 1)
	c.waitStarts(2, 1)
	c.waitGone(1)
	requireNoOverlap(t, c.log)
}

// A node cut off from etcd while its trainer stops slowly (it saves a
// checkpoint on SIGTERM) is fenced at its lease deadline, not at the end of
// the grace period.
func TestANodeCutOffDuringAStopIsFencedOnTime(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "cutoff")
	c.serve()
	var nodes []*clusterNode
	for i := range 3 {
		var env []string
		if i == 0 {
			env = []string{"FT_TERM_DELAY=5"} // only this one is slow to stop
		}
		nodes = append(nodes, c.sidecar(fmt.Sprintf("n%d", i), env, "--np", "2:3", "--ttl", "2s", "--grace-period", "30s"))
	}
	c.running(1, 3)
	c.waitStarts(1, 3)

	_, err := c.client.Scale(t.Context(), c.job, membership.FixedNP(2))
	require.NoError(t, err)
	time.Sleep(150 * time.Millisecond) // the stop has begun
	nodes[0].proxy.Cut()
	c.running(2, 2)
	c.waitStarts(2, 2)
	c.waitGone(1)
	requireNoOverlap(t, c.log)
	nodes[0].proxy.Heal()
}

// watchDelete reports when key is deleted.
func (c *jobCluster) watchDelete(key string) <-chan time.Time {
	return c.watchKey(key, clientv3.EventTypeDelete)
}

// watchPut reports when key is next written.
func (c *jobCluster) watchPut(key string) <-chan time.Time {
	return c.watchKey(key, clientv3.EventTypePut)
}

// watchKey reports the first event of the type on key from now on.
func (c *jobCluster) watchKey(key string, typ mvccpb.Event_EventType) <-chan time.Time {
	out := make(chan time.Time, 1)
	ch := c.cli.Watch(c.t.Context(), key)
	go func() {
		for resp := range ch {
			for _, ev := range resp.Events {
				if ev.Type == typ {
					out <- time.Now()
					return
				}
			}
		}
	}()
	return out
}

func sigcont(pid int) error { return syscall.Kill(pid, syscall.SIGCONT) }

// After an outage, etcd answers a new lease's grant late. The node must
// keep that lease, not fence itself again at once because the deadline,
// counted from when the grant was sent, has nearly passed.
func TestARegistrationAfterAnOutageKeepsItsNewLease(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "outage")
	c.serve()
	n := c.sidecar("n0", nil, "--np", "1", "--ttl", "3s")
	c.running(1, 1)

	// The link stalls: the node fences itself, then its grant waits.
	n.proxy.Hold()
	require.Eventually(t, func() bool { return strings.Count(n.proc.out.String(), "lease lost; fencing the node") == 1 },
		30*time.Second, time.Millisecond, "the node never fenced itself")
	time.Sleep(2400 * time.Millisecond) // 0.8 of the TTL: the grant is answered late
	n.proxy.Resume()

	c.running(2, 1)
	time.Sleep(6 * time.Second) // two TTLs: a node fenced again would show
	assert.Equal(t, 1, strings.Count(n.proc.out.String(), "lease lost; fencing the node"), "the node lost its new lease:\n%s", n.proc.out)
	nodes, err := c.client.Nodes(t.Context(), c.job)
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	assert.Equal(t, int64(1), nodes[0].LeaseLosses)
}

// Two sidecars with one node id (two on a host defaulting to its name, or
// a force-deleted pod that comes back while the old one runs) would run
// one rank twice: the second is refused with one line, and starts nothing.
func TestTwoSidecarsCannotRunOneNode(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "dup")
	c.serve()
	c.sidecar("n0", nil, "--np", "1", "--ttl", "2s")
	c.running(1, 1)
	c.waitStarts(1, 1)

	// On another machine: its state directory is not the first one's.
	second := c.sidecar("n0", nil, "--np", "1", "--ttl", "2s", "--state-dir", t.TempDir())
	assert.Equal(t, 1, second.proc.wait(t), "the second sidecar exits 1")
	lines := strings.Split(strings.TrimSpace(second.proc.out.String()), "\n")
	assert.Regexp(t, `^coordinator sidecar: .*node n0 of job dup is registered by another sidecar that is alive`, lines[len(lines)-1])
	assert.Len(t, startsOfGen(readBeats(t, c.log), 1), 1, "the second sidecar started nothing")
	st := c.running(1, 1)
	assert.Equal(t, int64(1), st.Generation)
}

// A node record without a lease would outlive its node; evicting it would
// revoke lease 0, fail, and retry on its own writes without end. It is
// refused as malformed.
func TestARecordWithoutALeaseIsRefused(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "nolease")
	c.serve("--stop-timeout", "1s")
	ghost := membership.Node{ID: "ghost", Role: membership.RoleWorker, Host: "127.0.0.1", Ports: []int{1}, NProc: 1, MasterPort: 2,
		State: membership.NodeRunning, Generation: 1}
	val, err := membership.Encode(ghost)
	require.NoError(t, err)
	_, err = c.cli.Put(t.Context(), membership.DefaultKeys().Node(c.job, "ghost"), val)
	require.NoError(t, err)
	c.sidecar("n0", nil, "--np", "2", "--ttl", "2s")
	time.Sleep(2 * time.Second) // whatever the ghost could cause happens now
	_, err = c.client.Scale(t.Context(), c.job, membership.FixedNP(1))
	require.NoError(t, err)
	c.running(1, 1)
	time.Sleep(3 * time.Second)

	resp, err := c.cli.Get(t.Context(), membership.DefaultKeys().Events(c.job), clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Less(t, resp.Count, int64(20), "events written in a few seconds")
	nodes, err := c.client.Nodes(t.Context(), c.job)
	require.NoError(t, err)
	for _, n := range nodes {
		assert.NotEqual(t, "ghost", n.ID, "a record without a lease is no node")
	}
}

// When a node dies with its sidecar (its pod is OOM-killed or preempted),
// its peers' collectives fail within milliseconds, while its lease still
// lives: that is a membership change, not a failure of the peers.
func TestAMemberLostIsNotChargedAsItsPeersFailure(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"0", "2"} {
		t.Run("fault tolerance "+level, func(t *testing.T) {
			t.Parallel()
			c := newJobCluster(t, "lost-"+level)
			c.serve()
			var nodes []*clusterNode
			for i := range 3 {
				nodes = append(nodes, c.sidecar(fmt.Sprintf("n%d", i), nil, "--np", "2:3", "--ttl", "2s", "--fault-tolerance-level", level))
			}
			c.running(1, 3)
			c.waitStarts(1, 3)
			peer := trainerOf(t, c, nodes[0])

			// n2's pod dies: its sidecar, guard and trainer at once.
			pod := append([]int{nodes[2].proc.cmd.Process.Pid}, guard.Descendants(nodes[2].proc.cmd.Process.Pid)...)
			for _, pid := range pod {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			// n0's collective fails because of it.
			require.NoError(t, syscall.Kill(peer, syscall.SIGUSR1))

			st := c.running(2, 2)
			assert.Equal(t, 0, st.Restarts, "no restart was charged")
			plan, err := c.client.Plan(t.Context(), c.job)
			require.NoError(t, err)
			assert.Empty(t, plan.Excluded, "the healthy peer is not benched")
			assert.Contains(t, plan.Reason, "not charged")
		})
	}
}

// trainerOf is the pid of the trainer running below a node's sidecar.
func trainerOf(t *testing.T, c *jobCluster, n *clusterNode) int {
	t.Helper()
	below := map[int]bool{}
	for _, pid := range guard.Descendants(n.proc.cmd.Process.Pid) {
		below[pid] = true
	}
	for _, b := range readBeats(t, c.log) {
		if b.kind == "start" && below[b.pid] {
			return b.pid
		}
	}
	t.Fatalf("no trainer below node %s", n.id)
	return 0
}

// A whole node frozen past its lease (sidecar, guard and trainer alike) and
// thawed: the fence wins. The trainer is killed, never sent SIGTERM by the
// stale stop plan the sidecar wakes up to, and any checkpoint it tries to
// commit in the moment before it dies is refused.
func TestAThawedNodeIsKilledAndCommitsNothing(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "thaw")
	c.serve()
	env := []string{"FT_CKPT=" + filepath.Join(c.dir, "ckpt"), "FT_BEAT=0.05"}
	var nodes []*clusterNode
	for i := range 3 {
		nodes = append(nodes, c.sidecar(fmt.Sprintf("n%d", i), env, "--np", "2:3", "--ttl", "2s"))
	}
	c.running(1, 3)
	c.waitStarts(1, 3)
	frozen := trainerOf(t, c, nodes[1])
	node := freezeTree(t, nodes[1].proc.cmd.Process.Pid)
	c.running(2, 2)
	gen2 := c.waitStarts(2, 2)
	require.Eventually(t, func() bool {
		for _, b := range readBeats(t, c.log) {
			if b.kind == "commit" && b.gen == 2 {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "generation 2 never committed a checkpoint")
	for i := len(node) - 1; i >= 0; i-- { // the trainer first
		// A process the thawed fence already killed, and its thawed parent
		// reaped, is gone: that is the fence doing its work.
		if err := syscall.Kill(node[i], syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			require.NoError(t, err)
		}
	}
	require.Eventually(t, func() bool { return !proctest.Alive(frozen) }, 30*time.Second, time.Millisecond)
	c.running(3, 3)

	started := gen2[0].micros
	for _, b := range gen2 {
		started = min(started, b.micros)
	}
	for _, b := range readBeats(t, c.log) {
		if b.pid != frozen {
			continue
		}
		assert.NotEqual(t, "term", b.kind, "the thawed trainer got SIGTERM from a stale plan")
		if b.kind == "commit" {
			assert.Less(t, b.micros, started, "the thawed trainer committed a checkpoint after generation 2 started")
		}
	}
	data, err := os.ReadFile(filepath.Join(c.dir, "ckpt"))
	require.NoError(t, err)
	gen, _, _ := strings.Cut(string(data), " ")
	assert.NotEqual(t, "1", gen, "a checkpoint of generation 1 is the last word")
}

// The guard, its fence watchdogs and `commit` run before the rest of the
// binary initialises: client-go, gRPC and etcd's client would cost them
// most of their start.
func TestTheGuardStartsBeforeTheHeavyPackagesInitialise(t *testing.T) {
	code, _, stderr := cli(t, []string{"GODEBUG=inittrace=1", "ELASTIC_FENCE_SOCKET="}, "commit", "--check")
	require.Equal(t, 0, code, stderr)
	// Without its descriptors the watchdog stops at its usage line, after
	// initialisation.
	code, _, watchErr := cli(t, []string{"GODEBUG=inittrace=1"}, "fence-watch")
	require.Equal(t, 2, code, watchErr)
	for _, trace := range []string{stderr, watchErr} {
		require.Contains(t, trace, "init runtime", "GODEBUG=inittrace=1 traced nothing")
		for _, heavy := range []string{"init k8s.io/client-go/", "init google.golang.org/grpc ", "init go.etcd.io/etcd/client/v3 ",
			"init github.com/prometheus/client_golang/prometheus "} {
			assert.NotContains(t, trace, heavy)
		}
	}
}

// A sidecar that leaves (SIGTERM: a preemption, a scale-down) says so before
// it stops its trainers, whose peers fail while it stops: not their failure.
func TestAMemberLeavingIsNotChargedAsItsPeersFailure(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "leaving")
	c.serve()
	var nodes []*clusterNode
	for i := range 3 {
		var env []string
		switch i {
		case 2:
			env = []string{"FT_TERM_DELAY=2"} // saves a checkpoint on its way out
		case 0:
			// The peer that fails is still there to fail when the test
			// sees n2 leaving, even if the generation's stop reached it
			// first (a loaded machine: it exited before the signal).
			env = []string{"FT_TERM_DELAY=2"}
		}
		nodes = append(nodes, c.sidecar(fmt.Sprintf("n%d", i), env, "--np", "2:3", "--ttl", "2s"))
	}
	c.running(1, 3)
	c.waitStarts(1, 3)
	peer := trainerOf(t, c, nodes[0])

	require.NoError(t, nodes[2].proc.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		for _, n := range mustNodes(t, c) {
			if n.ID == "n2" && n.State == membership.NodeLeaving {
				return true
			}
		}
		return false
	}, 30*time.Second, time.Millisecond, "the leaving node never said so")
	require.NoError(t, syscall.Kill(peer, syscall.SIGUSR1))

	st := c.running(2, 2)
	assert.Equal(t, 0, st.Restarts, "no restart was charged")
	requireNoOverlap(t, c.log)
}

func mustNodes(t *testing.T, c *jobCluster) []membership.LiveNode {
	nodes, err := c.client.Nodes(t.Context(), c.job)
	require.NoError(t, err)
	return nodes
}
