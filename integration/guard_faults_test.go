package integration

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/membership"
)

// guardOf is the pid of the guard process below a node's sidecar.
func guardOf(t *testing.T, n *clusterNode) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		for _, p := range guard.Descendants(n.proc.cmd.Process.Pid) {
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
			if err != nil {
				continue
			}
			args := strings.Split(string(cmdline), "\x00")
			if len(args) > 1 && args[1] == "guard" {
				pid = p
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "no guard below node %s", n.id)
	return pid
}

// A guard frozen on its own (SIGSTOP; or its loop blocked, e.g. in a
// checkpoint rename on a stalled file system) while its node is cut off
// from etcd: the sidecar's fence must still kill the trainer before etcd
// expires the lease and the next generation starts.
func TestAFrozenGuardOnACutOffNodeIsFencedByTheSidecar(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "frozenguard")
	c.serve()
	var nodes []*clusterNode
	for i := range 3 {
		nodes = append(nodes, c.sidecar(fmt.Sprintf("n%d", i), nil, "--np", "2:3", "--ttl", "2s"))
	}
	c.running(1, 3)
	c.waitStarts(1, 3)
	victim := trainerOf(t, c, nodes[1])
	expired := c.watchDelete(membership.DefaultKeys().Node(c.job, "n1"))
	freezePid(t, guardOf(t, nodes[1]))
	nodes[1].proxy.Cut()
	c.running(2, 2)
	c.waitStarts(2, 2)
	require.Eventually(t, func() bool { return !proctest.Alive(victim) }, 60*time.Second, 10*time.Millisecond)
	at := <-expired
	for _, b := range readBeats(t, c.log) {
		if b.pid == victim && b.micros >= at.UnixMicro() {
			t.Errorf("generation 1 trainer %d alive %s after etcd expired its node's lease", victim,
				time.Duration(b.micros-at.UnixMicro())*time.Microsecond)
			break
		}
	}
	if o := overlaps(readBeats(t, c.log)); len(o) > 0 {
		t.Logf("last overlap: %s", o[len(o)-1])
		for _, l := range strings.Split(nodes[1].proc.out.String(), "\n") {
			if strings.Contains(l, "lease lost") || strings.Contains(l, "did not kill") || strings.Contains(l, "guard") {
				t.Log(l)
			}
		}
	}
	requireNoOverlap(t, c.log)
	nodes[1].proxy.Heal()
}

// A sidecar and its guard frozen together while the trainer runs on
// (SIGSTOP of the supervisors only, as a debugger or a stuck runtime can
// leave them): neither can kill, and the trainer's fence watchdog, which
// runs where the trainer does, kills it by the deadline its sidecar last
// renewed, before etcd expires the node's lease and the next generation
// starts. Thawed, the node comes back.
func TestAFrozenSidecarAndGuardDoNotKeepTheirTrainerAlive(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "frozensupervisors")
	c.serve()
	var nodes []*clusterNode
	for i := range 3 {
		nodes = append(nodes, c.sidecar(fmt.Sprintf("n%d", i), nil, "--np", "2:3", "--ttl", "2s"))
	}
	c.running(1, 3)
	c.waitStarts(1, 3)
	victim := trainerOf(t, c, nodes[1])
	g := guardOf(t, nodes[1])
	expired := c.watchDelete(membership.DefaultKeys().Node(c.job, "n1"))
	freezePid(t, nodes[1].proc.cmd.Process.Pid)
	freezePid(t, g)
	require.True(t, proctest.Alive(victim), "the trainer runs on below its frozen supervisors")
	c.running(2, 2)
	c.waitStarts(2, 2)
	require.Eventually(t, func() bool { return !proctest.Alive(victim) }, 60*time.Second, 10*time.Millisecond,
		"the trainer of the frozen sidecar and guard ran on")
	at := <-expired
	for _, b := range readBeats(t, c.log) {
		if b.pid == victim && b.micros >= at.UnixMicro() {
			t.Errorf("generation 1 trainer %d alive %s after etcd expired its node's lease", victim,
				time.Duration(b.micros-at.UnixMicro())*time.Microsecond)
			break
		}
	}
	requireNoOverlap(t, c.log)

	require.NoError(t, sigcont(g))
	require.NoError(t, sigcont(nodes[1].proc.cmd.Process.Pid))
	c.running(3, 3)
	requireNoOverlap(t, c.log)
}

// A guard killed with SIGKILL: what its processes left must be found and
// killed before the next generation starts, including a process that
// started with a cleared environment (env -i, a sandbox, a daemon that
// rewrites its environment block), which carries no marker.
func TestAKilledGuardLeavesNoUnmarkedProcess(t *testing.T) {
	t.Parallel()
	for _, cg := range []string{"auto", "off"} {
		t.Run("cgroup "+cg, func(t *testing.T) { testKilledGuard(t, cg) })
	}
}

func testKilledGuard(t *testing.T, cg string) {
	c := newJobCluster(t, "killedguard")
	c.serve()
	// Without a cgroup (--cgroup off, or none writable) the subreaper path
	// alone must find it.
	n := c.sidecar("n0", []string{"FT_NESTED=1", "FT_CLEARENV=1"}, "--np", "1", "--ttl", "2s", "--cgroup", cg)
	c.running(1, 1)
	gen1 := c.waitStarts(1, 1)
	require.NoError(t, syscall.Kill(guardOf(t, n), syscall.SIGKILL))
	c.running(2, 1)
	c.waitStarts(2, 1)
	time.Sleep(time.Second)
	alive := proctest.Alive(gen1[0].pid)
	if alive {
		_ = syscall.Kill(gen1[0].pid, syscall.SIGKILL)
	}
	requireNoOverlap(t, c.log)
	require.False(t, alive, "generation 1's trainer outlived its guard")
}

// A guard killed with SIGKILL in the middle of a graceful stop (its trainer
// saving a checkpoint on SIGTERM, the trainer's child in a session of its
// own): the stop is acked only when all of it is gone.
func TestAGuardKilledDuringAStopLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, cg := range []string{"auto", "off"} {
		t.Run("cgroup "+cg, func(t *testing.T) {
			c := newJobCluster(t, "killedstop")
			c.serve()
			env := []string{"FT_NESTED=1", "FT_TERM_DELAY=30"}
			var nodes []*clusterNode
			for i := range 2 {
				nodes = append(nodes, c.sidecar(fmt.Sprintf("n%d", i), env, "--np", "1:2", "--ttl", "2s", "--grace-period", "60s", "--cgroup", cg))
			}
			c.running(1, 2)
			c.waitStarts(1, 2)
			_, err := c.client.Scale(t.Context(), c.job, membership.FixedNP(1))
			require.NoError(t, err)
			// Both trainers got SIGTERM and keep going.
			require.Eventually(t, func() bool {
				n := 0
				for _, b := range readBeats(t, c.log) {
					if b.kind == "term" {
						n++
					}
				}
				return n >= 2
			}, 30*time.Second, 5*time.Millisecond)
			for _, n := range nodes {
				require.NoError(t, syscall.Kill(guardOf(t, n), syscall.SIGKILL))
			}
			killed := time.Now()
			c.running(2, 1)
			c.waitStarts(2, 1)
			t.Logf("generation 2 started %s after the guards were killed", time.Since(killed))
			time.Sleep(time.Second)
			var alive []int
			for _, s := range startsOfGen(readBeats(t, c.log), 1) {
				if proctest.Alive(s.pid) {
					alive = append(alive, s.pid)
					_ = syscall.Kill(s.pid, syscall.SIGKILL)
				}
			}
			requireNoOverlap(t, c.log)
			require.Empty(t, alive, "generation 1 trainers outlived their guard")
		})
	}
}

// A trainer committing checkpoints as fast as it can while its node is cut
// off from etcd: no commit of it lands after its node's fence time, let
// alone after the lease expired.
func TestCommitsRacingTheFenceStopBeforeTheLeaseExpires(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "commitrace")
	c.serve()
	ckpt := c.dir + "/ckpt"
	env := []string{"FT_CKPT=" + ckpt, "FT_BEAT=0.001"}
	var nodes []*clusterNode
	for i := range 3 {
		nodes = append(nodes, c.sidecar(fmt.Sprintf("n%d", i), env, "--np", "2:3", "--ttl", "2s"))
	}
	c.running(1, 3)
	c.waitStarts(1, 3)
	victim := trainerOf(t, c, nodes[1])
	expired := c.watchDelete(membership.DefaultKeys().Node(c.job, "n1"))
	cut := time.Now()
	nodes[1].proxy.Cut()
	c.running(2, 2)
	c.waitStarts(2, 2)
	require.Eventually(t, func() bool { return !proctest.Alive(victim) }, 60*time.Second, 10*time.Millisecond)
	at := <-expired
	var last int64
	for _, b := range readBeats(t, c.log) {
		if b.pid == victim && b.kind == "commit" {
			last = max(last, b.micros)
		}
	}
	t.Logf("the cut-off trainer's last commit: %s after the cut, %s before the lease expired",
		time.Duration(last-cut.UnixMicro())*time.Microsecond, time.Duration(at.UnixMicro()-last)*time.Microsecond)
	require.Less(t, last, at.UnixMicro(), "a commit after the lease expired")
	requireNoOverlap(t, c.log)
	nodes[1].proxy.Heal()
}

// A sidecar and its guard killed together with SIGKILL (`pkill -9
// coordinator`: they are one binary) while the trainer runs below a
// wrapper (`bash train.sh` running python): the wrapper dies with the guard
// (Pdeathsig), but the trainer is re-parented outside the node and nothing
// there is left to kill it. The sidecar started again in its place kills
// what the dead guard's cgroup holds before it registers, so it never
// joins the job beside it. (In a container the sidecar is the first
// process and its death takes every process with it.) The node runs in a
// cgroup of its own, as a pod does: a guard that starts sweeps the dead
// guards' cgroups beside its own, and those of the tests running alongside
// would otherwise kill the trainer first (seen in CI).
func TestASidecarStartedAgainKillsWhatItsKilledPredecessorLeft(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "killedboth")
	c.serve()
	env := []string{"FT_NESTED=1"}
	pod := proctest.Cgroup(t, "killedboth")
	nodes := []*clusterNode{
		c.sidecar("n0", env, "--np", "1:2", "--ttl", "2s"),
		c.sidecarIn(pod, "n1", env, "--np", "1:2", "--ttl", "2s"),
	}
	c.running(1, 2)
	c.waitStarts(1, 2)
	victim := trainerOf(t, c, nodes[1])
	g := guardOf(t, nodes[1])
	// Stopped first, so that neither sees the other die and cleans up in
	// the moment between the two kills.
	sidecar := nodes[1].proc.cmd.Process.Pid
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		require.NoError(t, syscall.Kill(sidecar, sig))
		require.NoError(t, syscall.Kill(g, sig))
	}
	require.Eventually(t, func() bool { return !proctest.Alive(g) }, 10*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.True(t, proctest.Alive(victim), "the trainer outlives its sidecar and guard, so that this test can fail")

	registered := c.watchPut(membership.DefaultKeys().Node(c.job, "n1"))
	c.sidecarIn(pod, "n1", env, "--np", "1:2", "--ttl", "2s")
	select {
	case <-registered:
	case <-time.After(30 * time.Second):
		t.Fatal("the sidecar started again never registered")
	}
	alive := proctest.Alive(victim)
	if alive {
		_ = syscall.Kill(victim, syscall.SIGKILL)
	}
	require.False(t, alive, "the sidecar started again registered while its predecessor's trainer ran")
	c.running(2, 2)
}
