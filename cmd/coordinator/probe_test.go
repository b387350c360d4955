package main

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
)

// A sidecar started beside its etcd waits for it, within the dial timeout,
// instead of failing on the first refused connection.
func TestProbeWaitsForAnEtcdThatIsStarting(t *testing.T) {
	reserved, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := reserved.Addr().String()
	require.NoError(t, reserved.Close())

	endpoint := "http://" + addr
	_, err = probeEndpoints(context.Background(), []string{endpoint}, nil, 300*time.Millisecond)
	require.Error(t, err, "nothing listens yet")
	assert.Equal(t, "unreachable: connection refused (nothing listens on "+addr+")", err.Error())

	started := make(chan struct{})
	go func() {
		time.Sleep(500 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			close(started)
			return
		}
		close(started)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"etcdserver":"3.6.0","etcdcluster":"3.6.0"}`))
		})}
		t.Cleanup(func() { _ = srv.Close() })
		_ = srv.Serve(l)
	}()
	found, err := probeEndpoints(context.Background(), []string{endpoint}, nil, 10*time.Second)
	assert.NoError(t, err, "an etcd that starts within the dial timeout is found")
	assert.Equal(t, endpoint, found)
	<-started
}

// A member of the list that is down, or that accepts and never answers,
// does not keep the commands from the ones that work.
func TestAnEndpointDownFirstDoesNotStopTheRest(t *testing.T) {
	srv := etcdtest.Start(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedAddr := closed.Addr().String()
	require.NoError(t, closed.Close())
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() }) // accepted, never answered
		}
	}()
	for _, first := range []string{"http://" + closedAddr, "http://" + silent.Addr().String()} {
		code, stdout, stderr := runCLI(t, nil, "jobs", "--etcd-endpoints", first+","+srv.Endpoint(), "--dial-timeout", "2s")
		assert.Equal(t, 0, code, "first %s: %s", first, stderr)
		assert.Equal(t, "No jobs.\n", stdout)
	}
}
