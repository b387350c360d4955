package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/internal/testkit/etcdcluster"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// Three `coordinator etcd` members with peer TLS carry a job through the
// loss of their leader without restarting it, and the member rejoins on its
// data; a peer without a certificate is turned away.
func TestAThreeMemberEtcdWithPeerTLSLosesItsLeaderAndTheJobRunsOn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := makeCerts(t, dir)
	marker := newMarker()
	ctx := context.Background()
	etcd, err := etcdcluster.Start(ctx, etcdcluster.Config{Binary: binary, Dir: filepath.Join(dir, "etcd"),
		Env: []string{"ELASTIC_TEST_MARK=" + marker}, PeerTLS: &etcdcluster.TLSFiles{Cert: c.peerCert, Key: c.peerKey, CA: c.ca}})
	require.NoError(t, err)
	t.Cleanup(func() {
		etcd.Close()
		if t.Failed() {
			for _, m := range etcd.Members {
				t.Logf("%s's log:\n%s", m.Name, m.Log())
			}
		}
	})
	endpoints := strings.Join(etcd.Endpoints(), ",")

	// The peer port serves only peers with a certificate from the CA.
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(c.ca)
	require.NoError(t, err)
	pool.AppendCertsFromPEM(ca)
	peerURL := etcd.Members[0].PeerURL + "/members"
	_, err = (&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}).Get(peerURL)
	require.Error(t, err, "a peer without a certificate was let in")
	peer, err := tls.LoadX509KeyPair(c.peerCert, c.peerKey)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{peer}}}}).Get(peerURL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	cliEtcd, err := etcdclient.New(etcdclient.Config{Endpoints: etcd.Endpoints()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cliEtcd.Close() })
	client := jobclient.New(cliEtcd, membership.DefaultKeys())
	env := []string{"ELASTIC_TEST_MARK=" + marker, "FT_LOG=" + filepath.Join(dir, "trainer.log")}
	background(t, env, "serve", "--etcd-endpoints", endpoints, "--listen-metrics", "127.0.0.1:"+freePort(t))
	for _, id := range []string{"n0", "n1"} {
		background(t, env, "sidecar", "--etcd-endpoints", endpoints, "--job", "three", "--node-id", id, "--np", "2",
			"--host", "127.0.0.1", "--port", freePort(t), "--master-port", freePort(t), "--", "testdata/fencetrainer.sh")
	}
	running := func() membership.Status {
		var st membership.Status
		require.Eventually(t, func() bool {
			st, err = client.Status(ctx, "three")
			return err == nil && st.Phase == membership.JobRunning && st.Ready == 2
		}, 60*time.Second, 20*time.Millisecond, "the job never ran: %+v %v", &st, &err)
		return st
	}
	before := running()

	leader, err := etcd.Leader(ctx)
	require.NoError(t, err)
	etcd.Kill(leader)
	// A write in flight when the leader died may time out; the next goes
	// through, as two members of three keep a quorum.
	require.Eventually(t, func() bool {
		_, err = cliEtcd.Put(ctx, "/chaos/after-the-leader-died", "1")
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "no write went through: %v", &err)
	time.Sleep(2 * presence.DefaultTTL) // long enough for any lease to have run out
	after := running()
	assert.Equal(t, before.Generation, after.Generation, "the job was restarted by the loss of an etcd member")

	require.NoError(t, etcd.Restart(leader))
	require.NoError(t, etcd.WaitServing(ctx, leader))
	only, err := etcdclient.New(etcdclient.Config{Endpoints: []string{leader.ClientURL}})
	require.NoError(t, err)
	defer only.Close()
	require.Eventually(t, func() bool {
		got, err := only.Get(ctx, "/chaos/after-the-leader-died", clientv3.WithSerializable())
		return err == nil && len(got.Kvs) == 1
	}, 30*time.Second, 20*time.Millisecond, "the restarted member never caught up")
}

// Found by `make chaos`: a node evicted for a slow stop, then etcd's quorum
// lost for a few seconds. etcd's new leader gives every lease, the eviction
// record's too, a full TTL again, and the next generation waited for the
// record to expire, seconds after the evicted node had certainly fenced
// itself. The coordinator now counts a TTL from when it saw the evicted
// lease gone, on its own clock: the next generation starts while the record
// is still there, and still after the evicted node's trainer is dead.
func TestAnEvictionIsWaitedOutOnTheLeadersClockThroughAQuorumLoss(t *testing.T) {
	t.Parallel()
	c, etcd := newJobClusterOnThreeMembers(t, "evict-quorum")
	c.serve("--stop-timeout", "1s", "--session-ttl", "3s")
	c.sidecar("n0", []string{"FT_TERM_DELAY=60"}, "--np", "2", "--ttl", "3s", "--grace-period", "120s")
	fast := c.sidecar("n1", nil, "--np", "2", "--ttl", "3s")
	c.running(1, 2)
	c.waitStarts(1, 2)

	// Watch the eviction records: when one is written, and when it goes.
	written, gone := make(chan time.Time, 1), make(chan time.Time, 1)
	watch := c.cli.Watch(t.Context(), membership.DefaultKeys().Evictions(c.job), clientv3.WithPrefix())
	go func() {
		for resp := range watch {
			for _, ev := range resp.Events {
				ch := written
				if ev.Type == clientv3.EventTypeDelete {
					ch = gone
				}
				select {
				case ch <- time.Now():
				default:
				}
			}
		}
	}()

	require.NoError(t, syscall.Kill(trainerOf(t, c, fast), syscall.SIGKILL)) // a failure: the generation stops
	select {
	case <-written: // n0 did not ack in a second: evicted
	case <-time.After(30 * time.Second):
		t.Fatal("the slow node was never evicted")
	}
	lost := etcd.Members[:2]
	for _, m := range lost {
		etcd.Kill(m)
	}
	time.Sleep(3 * time.Second) // past the TTL: every node fences
	for _, m := range lost {
		require.NoError(t, etcd.Restart(m))
	}

	next := c.running(1, 2)
	starts := c.waitStarts(int(next.Generation), 1)
	var recordGone time.Time
	select {
	case recordGone = <-gone:
	case <-time.After(60 * time.Second):
		t.Fatal("the eviction record never expired")
	}
	started := time.UnixMicro(starts[0].micros)
	assert.True(t, started.Before(recordGone),
		"the next generation started at %s, after the eviction record expired at %s", started.Format("15:04:05.000"), recordGone.Format("15:04:05.000"))
	requireNoOverlap(t, c.log)
}
