package sidecar_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/internal/testkit/simnode"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
	"github.com/elastictraining/coordinator/sidecar"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is one simulated node on a real etcd, driven by plans the test
// writes itself, as a coordinator would.
type fixture struct {
	t    *testing.T
	srv  *etcdtest.Server
	keys membership.Keys
	node *simnode.Node
}

func newFixture(t *testing.T) *fixture {
	srv := etcdtest.Start(t)
	f := &fixture{t: t, srv: srv, keys: membership.DefaultKeys()}
	np := membership.DefaultSpec(membership.NP{Min: 1, Max: 1})
	f.node = simnode.Start(t, simnode.Config{Client: srv.Client(t), Keys: f.keys, Job: "job", ID: "n0", TTL: 2 * time.Second, Spec: &np})
	require.Eventually(t, func() bool { return f.node.Registration() != nil }, 10*time.Second, time.Millisecond)
	return f
}

func (f *fixture) putPlan(p membership.Plan) {
	val, err := membership.Encode(p)
	require.NoError(f.t, err)
	_, err = f.srv.Client(f.t).Put(f.t.Context(), f.keys.Plan("job"), val)
	require.NoError(f.t, err)
}

func (f *fixture) member(lease int64) membership.Member {
	return membership.Member{Node: "n0", Role: membership.RoleWorker, Rank: 0, Host: "127.0.0.1", Ports: []int{20001}, NProc: 1, Lease: lease}
}

// record waits until the node's record satisfies ok.
func (f *fixture) record(what string, ok func(membership.Node) bool) membership.Node {
	f.t.Helper()
	var n membership.Node
	require.Eventually(f.t, func() bool {
		resp, err := f.srv.Client(f.t).Get(f.t.Context(), f.keys.Node("job", "n0"))
		if err != nil || len(resp.Kvs) == 0 {
			return false
		}
		n, err = membership.DecodeNode(resp.Kvs[0].Value)
		return err == nil && ok(n)
	}, 10*time.Second, time.Millisecond, "node record never %s", what)
	return n
}

func TestAgentFollowsStopAndRun(t *testing.T) {
	f := newFixture(t)
	lease := int64(f.node.Registration().Lease())

	f.putPlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{f.member(lease)}, WorldSize: 1, Master: "127.0.0.1:20000"})
	f.record("acked running 1", func(n membership.Node) bool { return n.State == membership.NodeRunning && n.Generation == 1 })
	a, ok := f.node.Workload.Running()
	require.True(t, ok)
	assert.Equal(t, int64(1), a.Plan.Generation)

	f.putPlan(membership.Plan{Generation: 2, Phase: membership.PhaseStop, Members: []membership.Member{f.member(lease)}})
	f.record("acked stopped 2", func(n membership.Node) bool { return n.State == membership.NodeStopped && n.Generation == 2 })
	_, ok = f.node.Workload.Running()
	assert.False(t, ok, "the stop ack comes after the workload stopped")

	f.putPlan(membership.Plan{Generation: 2, Phase: membership.PhaseRun, Members: []membership.Member{f.member(lease)}, WorldSize: 1, Master: "127.0.0.1:20000"})
	f.record("acked running 2", func(n membership.Node) bool { return n.State == membership.NodeRunning && n.Generation == 2 })

	require.True(t, f.node.Workload.Exit(9))
	n := f.record("reported the failure", func(n membership.Node) bool { return n.State == membership.NodeFailed })
	assert.Equal(t, 9, n.ExitCode)
	assert.Equal(t, int64(2), n.Generation)
}

// A rank whose generation another node's fault stopped is said to have
// seen that fault, whatever it printed (gloo's "Connection reset by peer");
// a generation stopped for this node's own fault, or for a change of
// membership, is not.
func TestAgentSaysAFaultElsewhereStoppedIt(t *testing.T) {
	srv := etcdtest.Start(t)
	keys := membership.DefaultKeys()
	notes := &proctest.Buffer{}
	np := membership.DefaultSpec(membership.NP{Min: 1, Max: 1})
	node := simnode.Start(t, simnode.Config{Client: srv.Client(t), Keys: keys, Job: "job", ID: "n0", TTL: 2 * time.Second, Spec: &np, Notes: notes})
	require.Eventually(t, func() bool { return node.Registration() != nil }, 10*time.Second, time.Millisecond)
	f := &fixture{t: t, srv: srv, keys: keys, node: node}
	member := f.member(int64(node.Registration().Lease()))
	member.GlobalRank = 1
	// A run's reason is its stop's.
	run := func(gen int64, faults int, reason string) {
		f.putPlan(membership.Plan{Generation: gen, Phase: membership.PhaseRun, Members: []membership.Member{member}, WorldSize: 2,
			Master: "127.0.0.1:20000", Interruptions: faults, Reason: reason})
		f.record("acked running", func(n membership.Node) bool { return n.State == membership.NodeRunning && n.Generation == gen })
	}
	stop := func(gen int64, faults int, reason string) {
		f.putPlan(membership.Plan{Generation: gen, Phase: membership.PhaseStop, Members: []membership.Member{member}, Interruptions: faults, Reason: reason})
		f.record("acked stopped", func(n membership.Node) bool { return n.State == membership.NodeStopped && n.Generation == gen })
	}

	run(1, 0, "first generation")
	stop(2, 1, "node n1 (worker rank 0) failed with exit code 137")
	said := "[rank 1] generation 1 was stopped after node n1 (worker rank 0) failed with exit code 137: an error this rank printed as it stopped, " +
		"such as gloo's \"Connection reset by peer\", is that fault seen from here, not one of its own\n"
	assert.Equal(t, said, notes.String())

	run(2, 1, "node n1 (worker rank 0) failed with exit code 137")
	stop(3, 2, "node n0 (worker rank 1) failed with exit code 1")
	run(3, 2, "node n0 (worker rank 1) failed with exit code 1")
	stop(4, 2, "membership change: 2 → 3 workers")
	// A stop no node had to ack, seen only as the next run: said once.
	run(4, 2, "membership change: 2 → 3 workers")
	f.putPlan(membership.Plan{Generation: 5, Phase: membership.PhaseRun, Members: []membership.Member{member}, WorldSize: 2,
		Master: "127.0.0.1:20000", Interruptions: 3, Reason: "node n1 (worker rank 0) was lost"})
	f.record("acked running 5", func(n membership.Node) bool { return n.State == membership.NodeRunning && n.Generation == 5 })
	assert.Equal(t, said+strings.Replace(strings.Replace(said, "generation 1", "generation 4", 1),
		"node n1 (worker rank 0) failed with exit code 137", "node n1 (worker rank 0) was lost", 1), notes.String())
}

func TestAgentNeverStartsATableMadeForAnotherLease(t *testing.T) {
	f := newFixture(t)
	// A table that names this node under a lease it no longer holds: the
	// node restarted after the table was made, and the coordinator has yet
	// to notice.
	f.putPlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{f.member(12345)}, WorldSize: 1, Master: "127.0.0.1:20000"})
	assert.Never(t, func() bool { return len(f.node.Workload.Starts()) > 0 }, 500*time.Millisecond, 5*time.Millisecond)
	f.putPlan(membership.Plan{Generation: 2, Phase: membership.PhaseStop})
	f.record("acked stopped 2", func(n membership.Node) bool { return n.State == membership.NodeStopped && n.Generation == 2 })
	assert.Empty(t, f.node.Workload.Starts())
}

func TestAgentExitsWithTheJobsResult(t *testing.T) {
	f := newFixture(t)
	lease := int64(f.node.Registration().Lease())
	f.putPlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{f.member(lease)}, WorldSize: 1, Master: "127.0.0.1:20000"})
	f.record("acked running 1", func(n membership.Node) bool { return n.State == membership.NodeRunning })

	f.putPlan(membership.Plan{Generation: 2, Phase: membership.PhaseStop, Result: membership.JobFailed, ExitCode: 42, Reason: "node x failed"})
	res, err := f.node.Result()
	require.NoError(t, err)
	assert.Equal(t, sidecar.Result{Phase: membership.JobFailed, ExitCode: 42, Message: "node x failed"}, res)
	_, running := f.node.Workload.Running()
	assert.False(t, running)
	resp, err := f.srv.Client(t).Get(t.Context(), f.keys.Node("job", "n0"))
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs, "the node left: its lease is revoked")
}

func TestAgentStoresTheSpecOnlyIfThereIsNone(t *testing.T) {
	srv := etcdtest.Start(t)
	keys := membership.DefaultKeys()
	mk := func(id string, np int) *simnode.Node {
		spec := membership.DefaultSpec(membership.NP{Min: np, Max: np})
		return simnode.Start(t, simnode.Config{Client: srv.Client(t), Keys: keys, Job: "job", ID: id, TTL: 2 * time.Second, Spec: &spec})
	}
	mk("n0", 3)
	require.Eventually(t, func() bool {
		resp, err := srv.Client(t).Get(t.Context(), keys.Spec("job"))
		return err == nil && len(resp.Kvs) == 1
	}, 10*time.Second, time.Millisecond)
	mk("n1", 5)
	require.Eventually(t, func() bool {
		resp, err := srv.Client(t).Get(t.Context(), keys.Nodes("job"), clientWithPrefix())
		return err == nil && len(resp.Kvs) == 2
	}, 10*time.Second, time.Millisecond)
	resp, err := srv.Client(t).Get(t.Context(), keys.Spec("job"))
	require.NoError(t, err)
	s, err := membership.DecodeSpec(resp.Kvs[0].Value)
	require.NoError(t, err)
	assert.Equal(t, membership.NP{Min: 3, Max: 3}, s.NP, "the first sidecar's np stands")
}

func TestNewRejectsBadConfig(t *testing.T) {
	srv := etcdtest.Start(t)
	_, err := sidecar.New(sidecar.Config{Place: presence.Place{Client: srv.Client(t), Job: "Bad_Name"}, Workload: simnode.NewWorkload()})
	assert.ErrorIs(t, err, membership.ErrInvalidJobID)
	_, err = sidecar.New(sidecar.Config{Workload: simnode.NewWorkload(), Place: presence.Place{Client: srv.Client(t), Job: "job",
		Node: membership.Node{ID: "n0", Role: membership.RoleWorker, Host: "h", NProc: 1}}})
	assert.ErrorContains(t, err, "0 ports for 1 processes")
}

func clientWithPrefix() clientv3.OpOption { return clientv3.WithPrefix() }

// A lease lost while the node is leaving must not deadlock the leave: the
// registration waits in OnLost for the agent, which waits in Leave for the
// registration.
func TestLeaseLostWhileLeaving(t *testing.T) {
	f := newFixture(t)
	lease := int64(f.node.Registration().Lease())
	f.putPlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{f.member(lease)}, WorldSize: 1, Master: "127.0.0.1:20000"})
	f.record("acked running 1", func(n membership.Node) bool { return n.State == membership.NodeRunning })

	release := f.node.Workload.Hang()
	t.Cleanup(release)
	left := make(chan struct{})
	go func() {
		f.node.Leave() // blocks in the workload's Stop until released
		close(left)
	}()
	_, err := f.srv.Client(t).Revoke(t.Context(), clientv3.LeaseID(lease))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.node.Registration().Losses() == 1 }, 10*time.Second, time.Millisecond,
		"the registration saw the lease go while the agent was stopping")
	release()
	select {
	case <-left:
	case <-time.After(20 * time.Second):
		t.Fatal("leaving deadlocked with the lost lease")
	}
}

// A sidecar told to stop (a Ctrl-C, `run ... | head` ending) while it
// stops a generation cannot ack the stop: its context is done, and the
// node leaves next. That is said, not warned; the node leaves all the same.
func TestAnAckCutShortByTheSidecarsOwnStopIsNoWarning(t *testing.T) {
	srv := etcdtest.Start(t)
	keys := membership.DefaultKeys()
	logs := &proctest.Buffer{}
	np := membership.DefaultSpec(membership.NP{Min: 1, Max: 1})
	node := simnode.Start(t, simnode.Config{Client: srv.Client(t), Keys: keys, Job: "job", ID: "n0", TTL: 2 * time.Second, Spec: &np,
		Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})})
	require.Eventually(t, func() bool { return node.Registration() != nil }, 10*time.Second, time.Millisecond)
	f := &fixture{t: t, srv: srv, keys: keys, node: node}
	lease := int64(node.Registration().Lease())
	f.putPlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{f.member(lease)}, WorldSize: 1, Master: "127.0.0.1:20000"})
	f.record("acked running 1", func(n membership.Node) bool { return n.State == membership.NodeRunning })

	release := node.Workload.Hang()
	t.Cleanup(release)
	f.putPlan(membership.Plan{Generation: 2, Phase: membership.PhaseStop, Members: []membership.Member{f.member(lease)}})
	select {
	case <-node.Workload.Stopping():
	case <-time.After(20 * time.Second):
		t.Fatalf("the stop never began; log:\n%s", logs)
	}
	// The stop ends with the sidecar's context, before its ack; the
	// leave's own stop waits for the processes.
	left := make(chan struct{})
	go func() {
		node.Leave()
		close(left)
	}()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "ack not written") }, 20*time.Second, time.Millisecond,
		"the ack was never given up; log:\n%s", logs)
	release()
	<-left
	_, err := node.Result()
	require.ErrorIs(t, err, sidecar.ErrLeft)

	assert.Regexp(t, `\[INFO\]  sidecar: ack not written: the sidecar is stopping: .*state=stopped generation=2\n`, logs.String())
	assert.NotContains(t, logs.String(), "[WARN]")
	resp, err := srv.Client(t).Get(t.Context(), keys.Node("job", "n0"))
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs, "the node left")
}

func TestNamesFindsTheNodeAsAWord(t *testing.T) {
	for text, want := range map[string]bool{
		"node w-1 (worker rank 1) failed with exit code 137": true,
		"member w-1 lost":             true,
		"members w-0, w-1 and 3 more": true,
		"node w-10 failed":            false,
		"node xw-1 failed":            false,
		"lost w-1.":                   true,
		"node w-1.x failed":           false,
	} {
		assert.Equal(t, want, sidecar.NamesForTest(text, "w-1"), text)
	}
}

// A generation's processes may store while a stop no fault caused (a
// suspension, a change of membership) lets them finish gracefully: what a
// trainer saves as it stops, or the save its SIGTERM handler was sending,
// is the job's state. After a fault nothing they save is stored, and
// nothing once they stopped.
func TestAGenerationStoresUntilAGracefulStopNoFaultCausedEnds(t *testing.T) {
	for _, fault := range []bool{false, true} {
		t.Run(map[bool]string{false: "a change of membership", true: "a fault"}[fault], func(t *testing.T) {
			f := newFixture(t)
			lease := int64(f.node.Registration().Lease())
			f.putPlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{f.member(lease)}, WorldSize: 1, Master: "127.0.0.1:20000"})
			f.record("acked running 1", func(n membership.Node) bool { return n.State == membership.NodeRunning })
			require.NoError(t, f.node.Fence(1))

			release := f.node.Workload.Hang() // the processes take their time to stop
			t.Cleanup(release)
			stop := membership.Plan{Generation: 2, Phase: membership.PhaseStop, Members: []membership.Member{f.member(lease)}}
			if fault {
				stop.Interruptions = 1
			}
			f.putPlan(stop)
			time.Sleep(200 * time.Millisecond) // well into the stop
			if fault {
				assert.ErrorIs(t, f.node.Fence(1), sidecar.ErrFenced, "after a fault, nothing of generation 1 stores")
			} else {
				assert.NoError(t, f.node.Fence(1), "generation 1 stores while its processes stop")
			}
			release()
			f.record("acked stopped 2", func(n membership.Node) bool { return n.State == membership.NodeStopped && n.Generation == 2 })
			assert.ErrorIs(t, f.node.Fence(1), sidecar.ErrFenced, "and nothing once they stopped")
		})
	}
}
