package membership_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/etcdtest"
	"github.com/elastictraining/coordinator/membership"
)

func testNode(id string) membership.Node {
	return membership.Node{ID: id, Role: membership.RoleWorker, Host: "127.0.0.1", Ports: []int{9000}, NProc: 1, MasterPort: 9100}
}

func TestRegisterWritesRecordUnderLease(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()

	reg, err := membership.Register(t.Context(), membership.RegistrationConfig{
		Client: cli, Keys: keys, Job: "job", Node: testNode("n1"), TTL: 2 * time.Second,
	})
	require.NoError(t, err)

	resp, err := cli.Get(t.Context(), keys.Node("job", "n1"))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.Equal(t, int64(reg.Lease()), resp.Kvs[0].Lease)
	n, err := membership.DecodeNode(resp.Kvs[0].Value)
	require.NoError(t, err)
	require.Equal(t, membership.NodeWaiting, n.State)

	require.NoError(t, reg.Leave(t.Context()))
	resp, err = cli.Get(t.Context(), keys.Node("job", "n1"))
	require.NoError(t, err)
	require.Empty(t, resp.Kvs, "leave revokes the lease and the record goes with it")
	_ = context.Background
	_ = clientv3.WithPrefix
}
