package coordinator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

func TestScaleRejectsBadInput(t *testing.T) {
	h := newHarness(t)
	h.scale("job", "3")
	before, err := h.cli.Get(t.Context(), h.keys.Spec("job"))
	require.NoError(t, err)

	for _, tc := range []struct {
		job, np string
		want    error
		mention string
	}{
		{"job", "0", membership.ErrInvalidNP, "need at least 1"},
		{"job", "-1", membership.ErrInvalidNP, "not a positive whole number"},
		{"job", "5:2", membership.ErrInvalidNP, "minimum 5 is greater than maximum 2"},
		{"job", "abc", membership.ErrInvalidNP, `"abc" is not a positive whole number`},
		{"job", "1:100001", membership.ErrInvalidNP, "100001 is more than the maximum of 100000"},
		{"job", "", membership.ErrInvalidNP, "empty"},
		{"job", "1:2:3", membership.ErrInvalidNP, "not a positive whole number"},
		{"job", "2:", membership.ErrInvalidNP, "missing number"},
		{"Bad_Name", "2", membership.ErrInvalidJobID, "DNS-1123"},
		{"", "2", membership.ErrInvalidJobID, "empty"},
		{"-job", "2", membership.ErrInvalidJobID, "DNS-1123"},
		{"job/../x", "2", membership.ErrInvalidJobID, "DNS-1123"},
		{strings.Repeat("a", 64), "2", membership.ErrInvalidJobID, "longer than 63"},
	} {
		t.Run(tc.job+" "+tc.np, func(t *testing.T) {
			// What the command line does: parse, then scale.
			np, err := membership.ParseNP(tc.np)
			if err == nil {
				_, err = h.client.Scale(t.Context(), tc.job, np)
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.mention)
			assert.NotContains(t, err.Error(), "\n", "one line")
		})
	}
	// A program that builds an np by hand gets the same refusal.
	for _, np := range []membership.NP{{}, {Min: 5, Max: 2}, {Min: 0, Max: 3}, {Min: 1, Max: membership.MaxNP + 1}} {
		_, err := h.client.Scale(t.Context(), "job", np)
		assert.ErrorIs(t, err, membership.ErrInvalidNP, "np %+v", np)
	}
	after, err := h.cli.Get(t.Context(), h.keys.Spec("job"))
	require.NoError(t, err)
	assert.Equal(t, before.Kvs[0].ModRevision, after.Kvs[0].ModRevision, "rejected input changes nothing")

	_, err = h.client.Status(t.Context(), "nosuchjob")
	assert.ErrorIs(t, err, jobclient.ErrJobNotFound)
}

func TestScaleKeepsTheRestOfTheSpec(t *testing.T) {
	h := newHarness(t)
	spec := membership.DefaultSpec(membership.NP{Min: 2, Max: 2})
	spec.PS, spec.MaxRestarts, spec.SuccessPolicy = 1, 7, membership.SuccessRank0
	h.setSpec("job", spec)
	got, err := h.client.Scale(t.Context(), "job", membership.NP{Min: 2, Max: 6})
	require.NoError(t, err)
	spec.NP = membership.NP{Min: 2, Max: 6}
	assert.Equal(t, spec, got)

	// A malformed stored spec with no good one behind it (no coordinator
	// has run the job) is refused, saying what to write, and left alone.
	_, err = h.cli.Put(t.Context(), h.keys.Spec("job"), "{not json")
	require.NoError(t, err)
	_, err = h.client.Scale(t.Context(), "job", membership.FixedNP(3))
	require.ErrorIs(t, err, membership.ErrNoGoodSpec)
	assert.ErrorContains(t, err, `write a valid one to /elastic/jobs/job/spec, such as {"np":"2"}`)
	resp, err := h.cli.Get(t.Context(), h.keys.Spec("job"))
	require.NoError(t, err)
	assert.Equal(t, "{not json", string(resp.Kvs[0].Value))
}

// TestScaleRepairsAMalformedSpec writes garbage, then an np that cannot be,
// over a running job's spec: the job runs on, and a scale writes the last
// good spec with the new np, saying that it replaced a malformed value. A
// coordinator that takes over while the spec is malformed runs the job on
// the last good spec the status keeps.
func TestScaleRepairsAMalformedSpec(t *testing.T) {
	h := newHarness(t)
	leader := h.startCoordinator("c1", nil)
	spec := membership.DefaultSpec(membership.FixedNP(2))
	spec.MaxRestarts = 7
	h.setSpec("job", spec)
	h.nodes("job", "n0", "n1", "n2")
	running := h.waitRunning("job", 2, 0)

	for i, garbage := range []string{"\x00garbage", `{"np":-3,"maxRestarts":7}`} {
		_, err := h.cli.Put(t.Context(), h.keys.Spec("job"), garbage)
		require.NoError(t, err)
		st := h.waitStatus("job", "the spec said malformed", func(s membership.Status) bool { return strings.Contains(s.Malformed, "spec") })
		assert.Equal(t, running.Generation, st.Generation, "the job runs on under its last good spec")
		if i == 1 {
			// A leader new to the job meets the malformed spec first.
			leader.Stop()
			leader = h.startCoordinator("c2", nil)
		}

		np := membership.FixedNP(3 - i)
		written, err := h.client.Resize(t.Context(), jobclient.ScaleRequest{Job: "job", NP: np})
		require.NoError(t, err)
		require.ErrorIs(t, written.Repaired, membership.ErrInvalidRecord)
		assert.Equal(t, np, written.Spec.NP)
		assert.Equal(t, 7, written.Spec.MaxRestarts, "the rest of the last good spec")
		running = h.waitRunning("job", 3-i, running.Generation)
	}
}

func TestMalformedRecords(t *testing.T) {
	t.Run("node records are ignored with a warning", func(t *testing.T) {
		h := newHarness(t)
		reg := prometheus.NewRegistry()
		h.startCoordinator("c1", func(c *coordinator.Config) { c.Registerer = reg })
		h.scale("job", "2")
		nodes := h.nodes("job", "n0", "n1")
		h.waitRunning("job", 2, 0)

		for key, value := range map[string]string{
			h.keys.Node("job", "garbage"):  "\x00\xff not json",
			h.keys.Node("job", "wrong-id"): `{"id":"n0","role":"worker","host":"h","ports":[1],"nproc":1,"masterPort":2,"state":"waiting"}`,
			h.keys.Node("job", "bad-role"): `{"id":"bad-role","role":"chief","host":"h","ports":[1],"nproc":1,"masterPort":2,"state":"waiting"}`,
		} {
			_, err := h.cli.Put(t.Context(), key, value)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			return metricValue(t, reg, "elastic_coordinator_invalid_records_total") == 3
		}, 10*time.Second, 5*time.Millisecond)

		// The job goes on; a real change is still handled.
		nodes[1].Leave()
		h.node("job", "n2")
		st := h.waitRunning("job", 2, 1)
		assert.Equal(t, int64(2), st.Generation)
	})

	t.Run("a malformed plan is put back; the job keeps its generation", func(t *testing.T) {
		h := newHarness(t)
		reg := prometheus.NewRegistry()
		h.startCoordinator("c1", func(c *coordinator.Config) { c.Registerer = reg })
		h.scale("job", "2")
		h.nodes("job", "n0", "n1")
		before := h.waitRunning("job", 2, 0)
		good, err := h.cli.Get(t.Context(), h.keys.Plan("job"))
		require.NoError(t, err)

		_, err = h.cli.Put(t.Context(), h.keys.Plan("job"), `{"generation": "two"}`)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			resp, err := h.cli.Get(t.Context(), h.keys.Plan("job"))
			return err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == string(good.Kvs[0].Value)
		}, 10*time.Second, 5*time.Millisecond, "the last good plan was not put back")
		st := h.waitRunning("job", 2, 0)
		assert.Equal(t, before.Generation, st.Generation, "the generation stands")
		assert.Equal(t, 1.0, metricValue(t, reg, "elastic_coordinator_invalid_records_total"))
	})
	t.Run("a job whose first spec is malformed waits, then starts", func(t *testing.T) {
		h := newHarness(t)
		h.startCoordinator("c1", nil)
		_, err := h.cli.Put(t.Context(), h.keys.Spec("job"), `{"np": "0"}`)
		require.NoError(t, err)
		h.nodes("job", "n0", "n1")
		st := h.waitStatus("job", "waiting, saying why", func(s membership.Status) bool {
			return s.Phase == membership.JobWaiting && strings.Contains(s.Message, "the spec is malformed")
		})
		assert.Contains(t, st.Malformed, "spec")
		h.setSpec("job", membership.DefaultSpec(membership.FixedNP(2)))
		st = h.waitRunning("job", 2, 0)
		assert.Empty(t, st.Malformed)
	})
	t.Run("a malformed or invalid spec changes nothing until a valid one", func(t *testing.T) {
		h := newHarness(t)
		reg := prometheus.NewRegistry()
		h.startCoordinator("c1", func(c *coordinator.Config) { c.Registerer = reg })
		h.scale("job", "2")
		h.nodes("job", "n0", "n1", "n2")
		before := h.waitRunning("job", 2, 0)
		for _, bad := range []string{"not json {", `{"np": "-3"}`, `{"np": "0"}`, `{"np": "5:2"}`} {
			_, err := h.cli.Put(t.Context(), h.keys.Spec("job"), bad)
			require.NoError(t, err)
			st := h.waitStatus("job", "said the spec is malformed", func(s membership.Status) bool {
				return strings.HasPrefix(s.Malformed, "spec: ")
			})
			assert.Equal(t, membership.JobRunning, st.Phase, "%s", bad)
			assert.Equal(t, before.Generation, st.Generation, "%s: the generation stands", bad)
		}
		// A valid spec is followed as if the bad ones had never been.
		h.setSpec("job", membership.DefaultSpec(membership.FixedNP(3)))
		st := h.waitRunning("job", 3, 0)
		assert.Empty(t, st.Malformed)
		assert.Equal(t, before.Generation+1, st.Generation)
	})
}

// TestANewLeaderFindingMalformedRecordsChangesNothing: a leader that takes
// over after garbage was written knows no last good value of its own. A
// member's record put without its lease (as etcdctl does) keeps the member
// running while the lease its table names lives; a garbage spec leaves the
// running generation alone; and an eviction record that is garbage still
// holds a stop phase for the evicted member, whose TTL is unknown.
func TestANewLeaderFindingMalformedRecordsChangesNothing(t *testing.T) {
	h := newHarness(t)
	c1 := h.startCoordinator("c1", nil)
	h.scale("job", "2")
	nodes := h.nodes("job", "n0", "n1")
	before := h.waitRunning("job", 2, 0)
	c1.Stop()

	_, err := h.cli.Put(t.Context(), h.keys.Node("job", "n0"), "garbage")
	require.NoError(t, err)
	h.startCoordinator("c2", nil)
	h.waitStatus("job", "said the node's record is malformed", func(s membership.Status) bool { return strings.Contains(s.Malformed, "nodes/n0") })
	time.Sleep(3 * time.Second) // longer than the node's TTL: a lease check ran, and more
	st, err := h.client.Status(t.Context(), "job")
	require.NoError(t, err)
	assert.Equal(t, before.Generation, st.Generation, "a new leader restarted the job over a malformed node record")

	_, err = h.cli.Put(t.Context(), h.keys.Spec("job"), "not json {")
	require.NoError(t, err)
	st = h.waitStatus("job", "said the spec is malformed", func(s membership.Status) bool { return strings.Contains(s.Malformed, "spec") })
	assert.Equal(t, membership.JobRunning, st.Phase)
	assert.Equal(t, before.Generation, st.Generation)

	// n0 goes, for real: its lease with it. The job notices.
	nodes[0].Crash()
	h.setSpec("job", membership.DefaultSpec(membership.NP{Min: 1, Max: 2}))
	h.waitStatus("job", "restarted without n0", func(s membership.Status) bool { return s.Generation > before.Generation })
}

// TestAGarbageEvictionStillHoldsTheFence: a member evicted (its lease
// revoked while its sidecar is gone and cannot say its processes are
// dead, as for a frozen node) whose eviction record is then overwritten
// with garbage, read by a leader that never saw it good, still holds the
// next generation: the record's key names the node and the lease.
func TestAGarbageEvictionStillHoldsTheFence(t *testing.T) {
	h := newHarness(t)
	c1 := h.startCoordinator("c1", nil)
	h.scale("job", "2:2")
	nodes := h.nodes("job", "n0", "n1")
	before := h.waitRunning("job", 2, 0)
	resp, err := h.cli.Get(t.Context(), h.keys.Node("job", "n1"))
	require.NoError(t, err)
	lease := resp.Kvs[0].Lease
	c1.Stop()
	nodes[1].Crash()
	require.NoError(t, presence.Evict(t.Context(), h.cli, h.keys, presence.EvictRequest{Job: "job", Node: "n1", Lease: clientv3.LeaseID(lease), By: "test"}))
	_, err = h.cli.Put(t.Context(), h.keys.Eviction("job", "n1", lease), "garbage")
	require.NoError(t, err)
	h.node("job", "n2")

	h.startCoordinator("c2", nil)
	time.Sleep(5 * time.Second) // more than the node's TTL and the stop timeout
	st, err := h.client.Status(t.Context(), "job")
	require.NoError(t, err)
	assert.NotEqual(t, membership.JobRunning, st.Phase, "a generation ran beside an evicted node whose record was garbage: %+v", st)
	assert.Contains(t, st.Malformed, "evictions/n1")
	_, err = h.cli.Delete(t.Context(), h.keys.Eviction("job", "n1", lease))
	require.NoError(t, err)
	h.waitRunning("job", 2, before.Generation)
}

// metricValue reads a counter or gauge without labels from reg.
func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		m := f.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return 0
}

func TestRevokedEventLeaseIsReplaced(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", nil)
	h.scale("job", "1")
	n := h.nodes("job", "n0")
	h.waitRunning("job", 1, 0)

	resp, err := h.cli.Get(t.Context(), h.keys.Events("job"), clientv3WithPrefix())
	require.NoError(t, err)
	require.NotEmpty(t, resp.Kvs)
	_, err = h.cli.Revoke(t.Context(), clientv3LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)

	require.True(t, n[0].Workload.Exit(1))
	st := h.waitRunning("job", 1, 1)
	assert.Equal(t, 1, st.Restarts)
	assert.Contains(t, h.eventTypes("job"), "GenerationRunning")
}

// delete --force ends a job whose only spec is malformed: with no good
// spec to start from, one that asks for the end replaces it, and says so.
func TestACancelEndsAJobWhoseOnlySpecIsMalformed(t *testing.T) {
	h := newHarness(t)
	h.startCoordinator("c1", nil)
	_, err := h.cli.Put(t.Context(), h.keys.Spec("job"), "garbage")
	require.NoError(t, err)
	h.nodes("job", "n0")
	h.waitStatus("job", "waiting for a valid spec", func(s membership.Status) bool { return strings.Contains(s.Message, "malformed") })

	w, err := h.client.RequestCancel(t.Context(), "job", "deleted")
	require.NoError(t, err)
	assert.ErrorIs(t, w.Repaired, membership.ErrInvalidRecord, "it says it replaced a malformed value")
	final, err := h.client.WaitEnded(t.Context(), "job")
	require.NoError(t, err)
	assert.Equal(t, membership.JobFailed, final.Phase)
	assert.Contains(t, final.Message, "cancelled: deleted")
}
