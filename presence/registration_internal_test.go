package presence

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/membership"
)

// A node that fenced itself while etcd had lost its quorum came back to find
// its own old record still there: the new leader had extended every lease.
// It waited for that lease to run out (TTL and more) while the job could not
// restart without it; found by the chaos suite (quorum lost for 3–4 s with a
// 3 s TTL kept every node out for 4 s after etcd was back). Its own previous
// lease is revoked instead: its processes are gone.
func TestARecordUnderTheNodesOwnOldLeaseIsRevokedNotWaitedFor(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()
	node := membership.Node{ID: "n1", Role: membership.RoleWorker, Host: "127.0.0.1", Ports: []int{9000}, NProc: 1, MasterPort: 9100}
	value, err := membership.Encode(node)
	require.NoError(t, err)

	// The previous registration's lease, alive for a minute more.
	old, err := cli.Grant(t.Context(), 60)
	require.NoError(t, err)
	key := keys.Node("job", "n1")
	_, err = cli.Put(t.Context(), key, string(value), clientv3.WithLease(old.ID))
	require.NoError(t, err)
	fresh, err := cli.Grant(t.Context(), 5)
	require.NoError(t, err)

	r := &Registration{cfg: RegistrationConfig{Place: Place{Client: cli, Keys: keys, Job: "job", TTL: 5 * time.Second}}, key: key,
		logger: hclog.NewNullLogger()}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // far less than the old lease's minute
	defer cancel()
	fenceAt := r.fenceTime(time.Now(), 5)
	_, err = r.create(ctx, fresh.ID, fenceAt, old.ID, node)
	require.NoError(t, err)

	got, err := cli.Get(t.Context(), key)
	require.NoError(t, err)
	require.Len(t, got.Kvs, 1)
	assert.Equal(t, int64(fresh.ID), got.Kvs[0].Lease, "the record is under the new lease")
	ttl, err := cli.TimeToLive(t.Context(), old.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), ttl.TTL, "the old lease is gone")

	// Another sidecar's record is still waited for, not revoked.
	other, err := cli.Grant(t.Context(), 60)
	require.NoError(t, err)
	_, err = cli.Put(t.Context(), key, string(value), clientv3.WithLease(other.ID))
	require.NoError(t, err)
	short, cancelShort := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancelShort()
	_, err = r.create(short, fresh.ID, fenceAt, old.ID, node)
	assert.Error(t, err)
	ttl, err = cli.TimeToLive(t.Context(), other.ID)
	require.NoError(t, err)
	assert.Positive(t, ttl.TTL, "another sidecar's lease is left alone")
}
