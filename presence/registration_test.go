package presence_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/tcpproxy"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

func testNode(id string) membership.Node {
	return membership.Node{ID: id, Role: membership.RoleWorker, Host: "127.0.0.1", Ports: []int{9000}, NProc: 1, MasterPort: 9100}
}

func readNode(t *testing.T, srv *etcdtest.Server, key string) (membership.Node, int64, bool) {
	t.Helper()
	resp, err := srv.Client(t).Get(t.Context(), key)
	require.NoError(t, err)
	if len(resp.Kvs) == 0 {
		return membership.Node{}, 0, false
	}
	n, err := membership.DecodeNode(resp.Kvs[0].Value)
	require.NoError(t, err)
	return n, resp.Kvs[0].Lease, true
}

func TestRegistrationLifecycle(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()

	reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
		Place: presence.Place{Client: cli, Keys: keys, Job: "job", Node: testNode("n1"), TTL: 2 * time.Second},
	})
	require.NoError(t, err)
	n, lease, ok := readNode(t, srv, reg.Key())
	require.True(t, ok)
	assert.Equal(t, int64(reg.Lease()), lease, "the record lives under the lease")
	assert.Equal(t, membership.NodeWaiting, n.State)

	_, err = reg.Update(t.Context(), func(n *membership.Node) { n.State, n.Generation = membership.NodeRunning, 4 })
	require.NoError(t, err)
	n, _, _ = readNode(t, srv, reg.Key())
	assert.Equal(t, membership.NodeRunning, n.State)
	assert.Equal(t, int64(4), n.Generation)

	// The lease outlives several TTLs while it is renewed.
	require.Eventually(t, func() bool { return reg.Renewals() >= 4 }, 10*time.Second, 10*time.Millisecond)
	_, _, ok = readNode(t, srv, reg.Key())
	assert.True(t, ok)

	require.NoError(t, reg.Leave(t.Context()))
	_, _, ok = readNode(t, srv, reg.Key())
	assert.False(t, ok, "leave revokes the lease, and the record goes with it")
	require.NoError(t, reg.Leave(t.Context()), "leave twice is harmless")
}

func TestRegistrationRejectsShortTTL(t *testing.T) {
	srv := etcdtest.Start(t)
	_, err := presence.Register(t.Context(), presence.RegistrationConfig{
		Place: presence.Place{Client: srv.Client(t), Keys: membership.DefaultKeys(), Job: "job", Node: testNode("n1"), TTL: time.Second},
	})
	require.ErrorContains(t, err, "below the minimum of 2s")
}

func TestRegistrationFencesAndRegistersAgain(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	var lost, registered atomic.Int32
	reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
		Place:        presence.Place{Client: cli, Keys: membership.DefaultKeys(), Job: "job", Node: testNode("n1"), TTL: 2 * time.Second},
		OnLost:       func() { lost.Add(1) },
		OnRegistered: func(membership.Node) { registered.Add(1) },
	})
	require.NoError(t, err)
	t.Cleanup(reg.Close)
	_, err = reg.Update(t.Context(), func(n *membership.Node) { n.State, n.Generation = membership.NodeRunning, 2 })
	require.NoError(t, err)

	// The lease is revoked behind the node's back, as an eviction does.
	first := reg.Lease()
	_, err = cli.Revoke(t.Context(), first)
	require.NoError(t, err)

	require.Eventually(t, func() bool { return registered.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, int32(1), lost.Load(), "the owner heard of the loss before the node registered again")
	assert.Equal(t, int64(1), reg.Losses())
	n, lease, ok := readNode(t, srv, reg.Key())
	require.True(t, ok)
	assert.NotEqual(t, int64(first), lease, "a new lease")
	assert.Equal(t, membership.NodeWaiting, n.State, "a new registration has started nothing")
	assert.Equal(t, int64(0), n.Generation)
}

func TestRegistrationFencesWhenEtcdIsGone(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	lost := make(chan struct{})
	reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
		Place:  presence.Place{Client: cli, Keys: membership.DefaultKeys(), Job: "job", Node: testNode("n1"), TTL: 2 * time.Second},
		OnLost: func() { close(lost) },
	})
	require.NoError(t, err)
	t.Cleanup(reg.Close)

	// With etcd gone the lease cannot be renewed: the node fences itself
	// while etcd is still down, without hearing from the server.
	srv.Stop()
	select {
	case <-lost:
	case <-time.After(20 * time.Second):
		t.Fatal("the node never fenced itself")
	}
	_, err = reg.Update(t.Context(), func(n *membership.Node) { n.State = membership.NodeStopped })
	assert.ErrorIs(t, err, presence.ErrNotRegistered)

	srv.Restart(t)
	require.Eventually(t, func() bool { return reg.Lease() != 0 }, 20*time.Second, 10*time.Millisecond, "registered again once etcd is back")
	n, _, ok := readNode(t, srv, reg.Key())
	require.True(t, ok)
	assert.Equal(t, membership.NodeWaiting, n.State)
}

// A write of the record that blocks (etcd unreachable) must not hold up the
// fence: the node fences itself before etcd can expire its lease.
func TestABlockedWriteDoesNotDelayTheFence(t *testing.T) {
	srv := etcdtest.Start(t)
	proxy, err := tcpproxy.Start(strings.TrimPrefix(srv.Endpoint(), "http://"))
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: []string{"http://" + proxy.Addr()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	lost := make(chan time.Time, 1)
	reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
		Place:  presence.Place{Client: cli, Keys: membership.DefaultKeys(), Job: "job", Node: testNode("n1"), TTL: 2 * time.Second},
		OnLost: func() { lost <- time.Now() },
	})
	require.NoError(t, err)
	t.Cleanup(reg.Close)
	expired := make(chan time.Time, 1)
	watch := srv.Client(t).Watch(t.Context(), reg.Key())
	go func() {
		for resp := range watch {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					expired <- time.Now()
					return
				}
			}
		}
	}()

	proxy.Hold()
	written := make(chan struct{})
	go func() {
		defer close(written)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = reg.Update(ctx, func(n *membership.Node) { n.State = membership.NodeStopped })
	}()
	var lostAt, expiredAt time.Time
	select {
	case lostAt = <-lost:
	case <-time.After(30 * time.Second):
		t.Fatal("the node never fenced itself")
	}
	select {
	case expiredAt = <-expired:
	case <-time.After(30 * time.Second):
		t.Fatal("the lease never expired")
	}
	assert.True(t, lostAt.Before(expiredAt), "fenced %s after etcd expired the lease", lostAt.Sub(expiredAt))
	proxy.Resume()
	<-written
}

// A record left by a dead sidecar under a lease of a longer TTL than this
// one's: the registration waits it out, and the lease it will write under
// stays alive meanwhile (it expired during the wait, and registering failed
// with "requested lease not found").
func TestAWaitLongerThanTheTTLKeepsTheNewLeaseAlive(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()
	dead, err := cli.Grant(t.Context(), 5)
	require.NoError(t, err)
	value, err := membership.Encode(testNode("n1"))
	require.NoError(t, err)
	_, err = cli.Put(t.Context(), keys.Node("job", "n1"), value, clientv3.WithLease(dead.ID))
	require.NoError(t, err)

	start := time.Now()
	reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
		Place: presence.Place{Client: cli, Keys: keys, Job: "job", Node: testNode("n1"), TTL: 2 * time.Second},
	})
	require.NoError(t, err)
	defer reg.Close()
	assert.Greater(t, time.Since(start), 3*time.Second, "the dead sidecar's record was waited out")
	_, lease, ok := readNode(t, srv, reg.Key())
	require.True(t, ok)
	assert.Equal(t, int64(reg.Lease()), lease)
}

// TestARecordUnderNoLeaseIsReplaced: a value put over a node's key without
// a lease, as etcdctl does, is no sidecar's: the node registers over it at
// once instead of taking it for a live sidecar's.
func TestARecordUnderNoLeaseIsReplaced(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()
	_, err := cli.Put(t.Context(), keys.Node("job", "n0"), "garbage")
	require.NoError(t, err)
	reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
		Place: presence.Place{Client: cli, Keys: keys, Job: "job", Node: testNode("n0"), TTL: 3 * time.Second},
	})
	require.NoError(t, err)
	t.Cleanup(reg.Close)
	n, lease, ok := readNode(t, srv, reg.Key())
	require.True(t, ok)
	assert.Equal(t, "n0", n.ID)
	assert.Equal(t, int64(reg.Lease()), lease)
}
