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

func TestTakeOver(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()
	reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
		Place: presence.Place{Client: cli, Keys: keys, Job: "job", Node: testNode("n1"), TTL: 10 * time.Second},
	})
	require.NoError(t, err)
	t.Cleanup(reg.Close)
	lease := reg.Lease()

	req := presence.TakeoverRequest{Job: "job", Node: "n1", Lease: lease, TTL: 10 * time.Second}
	require.NoError(t, presence.TakeOver(t.Context(), cli, keys, req))
	_, _, ok := readNode(t, srv, reg.Key())
	assert.False(t, ok, "the node's record went with its lease, long before its TTL")
	tl, err := cli.TimeToLive(t.Context(), lease)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), tl.TTL, "the lease is revoked")

	resp, err := cli.Get(t.Context(), keys.Takeover("job", "n1", int64(lease)))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, "a takeover record says the lease's processes are dead")
	rec, err := membership.DecodeTakeover(resp.Kvs[0].Value)
	require.NoError(t, err)
	assert.Equal(t, membership.Takeover{Node: "n1", Lease: int64(lease), Pid: rec.Pid, At: rec.At}, rec)
	recTTL, err := cli.TimeToLive(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)
	assert.Equal(t, int64(23), recTTL.GrantedTTL, "the record outlives any eviction record of the lease (its TTL and 2 s): twice the TTL and 3 s")

	// A lease already gone (expired, or evicted) is taken over all the same.
	require.NoError(t, presence.TakeOver(t.Context(), cli, keys, req))
	assert.Error(t, presence.TakeOver(t.Context(), cli, keys, presence.TakeoverRequest{Job: "job", Node: "n1"}), "no lease")
}
