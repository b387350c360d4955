package main

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
)

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
