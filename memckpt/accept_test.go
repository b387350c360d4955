package memckpt

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// idle opens n connections to addr from the address from that send
// nothing; each is sent on closed once the sidecar has closed it.
func idle(t *testing.T, addr, from string, n int, closed chan<- net.Conn) {
	t.Helper()
	for range n {
		c, err := dialFrom(from, addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		go func() {
			// Only the sidecar ends the read: it closes the connection
			// (EOF, or a reset), or the test's cleanup does.
			_, _ = io.Copy(io.Discard, c)
			closed <- c
		}()
	}
}

// waitClosed waits for n connections to be closed by the sidecar.
func waitClosed(t *testing.T, closed <-chan net.Conn, n int, within time.Duration) {
	t.Helper()
	timeout := time.After(within)
	for i := range n {
		select {
		case <-closed:
		case <-timeout:
			require.Failf(t, "connections not closed", "%d of %d closed within %s", i, n, within)
		}
	}
}

// TestUnauthenticatedConnectionsAreCapped: an address that opens
// connections and holds them gets at most the cap, the rest closed at
// once and counted, not said one by one; the job's peer, from another
// address, still pushes, taking the place of the flood's oldest.
func TestUnauthenticatedConnectionsAreCapped(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	var logs proctest.Buffer
	const limit, over = 8, 5
	s := guarded(t, cli, Config{MaxUnauthenticated: limit, HandshakeTimeout: time.Hour}, &logs)
	peer := genuinePeer(t, cli)

	closed := make(chan net.Conn, limit+over+1)
	idle(t, s.Addr(), "127.0.0.2", limit+over, closed)
	waitClosed(t, closed, over, 10*time.Second)
	require.Eventually(t, func() bool {
		conns, hosts := s.gate.holding()
		return conns == limit && hosts == 1
	}, 10*time.Second, time.Millisecond, "the cap's connections are held")

	require.NoError(t, peer.push(t, s, 1), "the job's peer pushes while the cap is full")
	waitClosed(t, closed, 1, 10*time.Second) // the flood's oldest gave its place
	conns, _ := s.gate.holding()
	assert.Equal(t, limit-1, conns, "the peer, authenticated, is no longer held")
	select {
	case <-closed:
		t.Fatal("more of the flood closed than the peer needed")
	default:
	}

	lines, _ := refusedLines(logs.String())
	require.Len(t, lines, 1, "the first refusal is said at once, the rest counted: %s", logs.String())
	assert.Contains(t, lines[0], "peer=127.0.0.2 refusals=1 ")
	assert.Contains(t, lines[0], errTooManyUnauthenticated.Error())
	s.Close()
	lines, total := refusedLines(logs.String())
	assert.Len(t, lines, 2, "%s", logs.String())
	assert.Equal(t, over+1, total, "the connections over the cap and the one evicted: %s", logs.String())
	assert.Contains(t, lines[len(lines)-1], errEvicted.Error())
}

// TestAHandshakeHasADeadline: connections that send nothing, or half a
// TLS record, are closed at the handshake's deadline, and their places
// freed.
func TestAHandshakeHasADeadline(t *testing.T) {
	srv := etcdtest.Start(t)
	var logs proctest.Buffer
	s := guarded(t, srv.Client(t), Config{MaxUnauthenticated: 4, HandshakeTimeout: 200 * time.Millisecond}, &logs)

	closed := make(chan net.Conn, 4)
	idle(t, s.Addr(), "127.0.0.2", 2, closed)
	for range 2 {
		c, err := dialFrom("127.0.0.2", s.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_, err = c.Write(bogusHello[:7]) // a record of 10 bytes announced, 2 sent
		require.NoError(t, err)
		go func() {
			_, _ = io.Copy(io.Discard, c)
			closed <- c
		}()
	}
	waitClosed(t, closed, 4, 10*time.Second)
	require.Eventually(t, func() bool {
		conns, hosts := s.gate.holding()
		return conns == 0 && hosts == 0
	}, 10*time.Second, time.Millisecond)
	s.Close()
	_, total := refusedLines(logs.String())
	assert.Equal(t, 4, total, "%s", logs.String())
	assert.Contains(t, logs.String(), "i/o timeout")
}

// The gate's share: over the cap, a newcomer takes the place of the
// oldest of the address that holds the most, while that one would still
// hold more than the newcomer's.
func TestTheGateSharesItsPlacesBetweenAddresses(t *testing.T) {
	g := newGate(4)
	conn := func() net.Conn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return a
	}
	var first *waiting
	for i := range 4 {
		w, ev := g.admit(conn(), "A")
		require.NotNil(t, w)
		require.Nil(t, ev)
		if i == 0 {
			first = w
		}
	}
	w, ev := g.admit(conn(), "A")
	assert.Nil(t, w, "A holds the most: refused")
	assert.Nil(t, ev)

	b1, ev := g.admit(conn(), "B")
	require.NotNil(t, b1)
	assert.Same(t, first, ev, "A's oldest gives its place")
	assert.True(t, g.leave(first), "it was evicted")
	_, ev = g.admit(conn(), "B")
	assert.NotNil(t, ev, "A holds 3, B would hold 2")
	w, ev = g.admit(conn(), "B")
	assert.Nil(t, w, "A and B hold 2 each: B would hold 3")
	assert.Nil(t, ev)
	conns, hosts := g.holding()
	assert.Equal(t, 4, conns)
	assert.Equal(t, 2, hosts)

	assert.False(t, g.leave(b1))
	w, ev = g.admit(conn(), "C")
	assert.NotNil(t, w, "a place is free")
	assert.Nil(t, ev)
}
