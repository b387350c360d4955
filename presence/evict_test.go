package presence_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

func TestEvict(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()
	register := func(id string) *presence.Registration {
		reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
			Place: presence.Place{Client: cli, Keys: keys, Job: "job", Node: testNode(id), TTL: 3 * time.Second},
		})
		require.NoError(t, err)
		t.Cleanup(reg.Close)
		return reg
	}
	records := func(id string) []membership.Eviction {
		resp, err := cli.Get(t.Context(), keys.Evictions("job")+id+"/", clientv3.WithPrefix())
		require.NoError(t, err)
		var es []membership.Eviction
		for _, kv := range resp.Kvs {
			e, err := membership.DecodeEviction(kv.Value)
			require.NoError(t, err)
			assert.Equal(t, keys.Eviction("job", id, e.Lease), string(kv.Key))
			es = append(es, e)
		}
		return es
	}
	record := func(id string) (membership.Eviction, int64, bool) {
		resp, err := cli.Get(t.Context(), keys.Evictions("job")+id+"/", clientv3.WithPrefix())
		require.NoError(t, err)
		require.LessOrEqual(t, len(resp.Kvs), 1)
		if len(resp.Kvs) == 0 {
			return membership.Eviction{}, 0, false
		}
		e, err := membership.DecodeEviction(resp.Kvs[0].Value)
		require.NoError(t, err)
		return e, resp.Kvs[0].Lease, true
	}

	t.Run("revokes the lease and leaves a record that outlives the node's deadline", func(t *testing.T) {
		reg := register("n1")
		lease := reg.Lease()
		require.NoError(t, presence.Evict(t.Context(), cli, keys, presence.EvictRequest{Job: "job", Node: "n1", Lease: lease, By: "test", Reason: "r"}))
		_, _, ok := readNode(t, srv, reg.Key())
		assert.False(t, ok, "the node's record went with its lease")
		e, recordLease, ok := record("n1")
		require.True(t, ok)
		assert.Equal(t, int64(lease), e.Lease)
		assert.Equal(t, int64(3), e.TTLSeconds)
		tl, err := cli.TimeToLive(t.Context(), clientv3.LeaseID(recordLease))
		require.NoError(t, err)
		assert.Greater(t, tl.TTL, int64(3), "the record lives longer than the node's TTL")
	})
	t.Run("a node evicted again under a new lease keeps the first record", func(t *testing.T) {
		// A pod deleted by force comes back under the same name and is
		// deleted again: the first one's processes may still run.
		first := register("n5")
		require.NoError(t, presence.Evict(t.Context(), cli, keys, presence.EvictRequest{Job: "job", Node: "n5", Lease: first.Lease(), By: "test"}))
		first.Close()
		second := register("n5")
		require.NoError(t, presence.Evict(t.Context(), cli, keys, presence.EvictRequest{Job: "job", Node: "n5", Lease: second.Lease(), By: "test"}))
		var leases []int64
		for _, e := range records("n5") {
			leases = append(leases, e.Lease)
		}
		assert.ElementsMatch(t, []int64{int64(first.Lease()), int64(second.Lease())}, leases)
	})
	t.Run("a lease already gone counts as evicted", func(t *testing.T) {
		reg := register("n2")
		lease := reg.Lease()
		require.NoError(t, reg.Leave(t.Context()))
		require.NoError(t, presence.Evict(t.Context(), cli, keys, presence.EvictRequest{Job: "job", Node: "n2", Lease: lease}))
		_, _, ok := record("n2")
		assert.False(t, ok)
	})
	t.Run("another lease than the record's is nothing to evict", func(t *testing.T) {
		reg := register("n3")
		other, err := cli.Grant(t.Context(), 10)
		require.NoError(t, err)
		err = presence.Evict(t.Context(), cli, keys, presence.EvictRequest{Job: "job", Node: "n3", Lease: other.ID})
		assert.ErrorIs(t, err, presence.ErrEvictionMoot)
		_, _, ok := readNode(t, srv, reg.Key())
		assert.True(t, ok, "the node was not touched")
	})
	t.Run("processes known to be gone need no record", func(t *testing.T) {
		reg := register("n4")
		require.NoError(t, presence.Evict(t.Context(), cli, keys, presence.EvictRequest{Job: "job", Node: "n4", Lease: reg.Lease(), StoppedForSure: true}))
		_, _, ok := record("n4")
		assert.False(t, ok)
		_, _, ok = readNode(t, srv, reg.Key())
		assert.False(t, ok)
	})
}

// TestAnEvictedNodeSaysItsProcessesAreDead: a node whose lease someone
// else revoked, leaving an eviction record, records that its processes
// are dead (a takeover of its own lease) once they are: when it leaves,
// and when it finds the lease gone while it runs. The coordinator then
// waits for no deadline.
func TestAnEvictedNodeSaysItsProcessesAreDead(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()
	takenOver := func(id string, lease clientv3.LeaseID) bool {
		resp, err := cli.Get(t.Context(), keys.Takeover("job", id, int64(lease)))
		require.NoError(t, err)
		if len(resp.Kvs) == 0 {
			return false
		}
		rec, err := membership.DecodeTakeover(resp.Kvs[0].Value)
		require.NoError(t, err)
		return rec.Node == id && rec.Lease == int64(lease)
	}

	t.Run("when it leaves", func(t *testing.T) {
		reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
			Place: presence.Place{Client: cli, Keys: keys, Job: "job", Node: testNode("leaves"), TTL: 30 * time.Second},
		})
		require.NoError(t, err)
		lease := reg.Lease()
		require.NoError(t, presence.Evict(t.Context(), cli, keys, presence.EvictRequest{Job: "job", Node: "leaves", Lease: lease, By: "test"}))
		assert.False(t, takenOver("leaves", lease), "nothing said before the node stopped")
		require.NoError(t, reg.Leave(t.Context()))
		assert.True(t, takenOver("leaves", lease), "the leaving node did not say its processes are dead")
	})
	t.Run("when it finds its lease gone", func(t *testing.T) {
		lost := make(chan struct{}, 1)
		reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
			Place:  presence.Place{Client: cli, Keys: keys, Job: "job", Node: testNode("runs"), TTL: 3 * time.Second},
			OnLost: func() { lost <- struct{}{} },
		})
		require.NoError(t, err)
		t.Cleanup(reg.Close)
		lease := reg.Lease()
		require.NoError(t, presence.Evict(t.Context(), cli, keys, presence.EvictRequest{Job: "job", Node: "runs", Lease: lease, By: "test"}))
		select {
		case <-lost:
		case <-time.After(10 * time.Second):
			t.Fatal("the node never found its lease gone")
		}
		require.Eventually(t, func() bool { return takenOver("runs", lease) }, 10*time.Second, 10*time.Millisecond,
			"the fenced node did not say its processes are dead")
	})
	t.Run("not while it runs", func(t *testing.T) {
		// A frozen node says nothing: the record it would write is
		// written only by the node itself, after its OnLost.
		block := make(chan struct{})
		reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
			Place:  presence.Place{Client: cli, Keys: keys, Job: "job", Node: testNode("stuck"), TTL: 3 * time.Second},
			OnLost: func() { <-block },
		})
		require.NoError(t, err)
		lease := reg.Lease()
		require.NoError(t, presence.Evict(t.Context(), cli, keys, presence.EvictRequest{Job: "job", Node: "stuck", Lease: lease, By: "test"}))
		time.Sleep(2 * time.Second) // a renewal finds the lease gone: OnLost runs, and blocks
		assert.False(t, takenOver("stuck", lease), "a node whose processes were not yet killed said they were dead")
		close(block)
		require.Eventually(t, func() bool { return takenOver("stuck", lease) }, 10*time.Second, 10*time.Millisecond)
		reg.Close()
	})
}
