package memckpt

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// The reasons a connection is refused before its handshake ends.
var (
	errTooManyUnauthenticated = errors.New("too many connections not yet authenticated; this address holds the most")
	errEvicted                = errors.New("closed before it authenticated: a connection from an address that held fewer needed its place")
)

// servePeers accepts the other sidecars of the job. A connection must
// prove the job's secret within Config.HandshakeTimeout; until it has, it
// is one of the at most Config.MaxUnauthenticated the gate holds.
// Refusals are counted per address and said once an interval.
func (s *Service) servePeers() {
	for {
		raw, err := s.peers.Accept()
		if err != nil {
			return
		}
		// The handshake's deadline, armed before anything reads.
		_ = raw.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
		host := hostOf(raw.RemoteAddr())
		w, evicted := s.gate.admit(raw, host)
		if evicted != nil {
			evicted.conn.Close()
		}
		if w == nil {
			s.refused(host, errTooManyUnauthenticated)
			raw.Close()
			continue
		}
		conn := tls.Server(raw, s.auth.server)
		untrack := s.track(conn)
		s.goRun(func() {
			defer untrack()
			err := s.auth.accept(conn)
			if s.gate.leave(w) {
				err = errEvicted
			}
			if err != nil {
				s.refused(host, err)
				return
			}
			s.servePeer(conn)
		})
	}
}

// gate holds the peer connections that have not yet proven the job's
// secret: at most max of them, shared between the addresses they come
// from. A connection over the cap takes the place of the oldest held by
// the address that holds the most, if that address would still hold more
// than the newcomer's; otherwise it is refused. So one address that opens
// connections and holds them (until the handshake's deadline) cannot keep
// the job's peers out, which come from other addresses and hold one or two
// each; its own connections over the cap are closed at once.
type gate struct {
	max int

	mu     sync.Mutex
	held   int
	byHost map[string][]*waiting // oldest first
}

// waiting is one connection held by the gate.
type waiting struct {
	conn net.Conn
	host string
	// evicted, under the gate's lock: it gave its place to another.
	evicted bool
}

func newGate(limit int) *gate {
	return &gate{max: limit, byHost: map[string][]*waiting{}}
}

// admit holds conn, from host, until leave. It returns nil when conn is
// refused, and the connection evicted to make room, if any, which the
// caller closes.
func (g *gate) admit(conn net.Conn, host string) (w, evicted *waiting) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held >= g.max {
		most := ""
		for h, ws := range g.byHost {
			if most == "" || len(ws) > len(g.byHost[most]) {
				most = h
			}
		}
		if len(g.byHost[most]) <= len(g.byHost[host])+1 {
			return nil, nil
		}
		evicted = g.byHost[most][0]
		evicted.evicted = true
		g.remove(evicted)
	}
	w = &waiting{conn: conn, host: host}
	g.byHost[host] = append(g.byHost[host], w)
	g.held++
	return w, evicted
}

// leave lets w go: it authenticated or failed. It reports whether w had
// been evicted.
func (g *gate) leave(w *waiting) (evicted bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.evicted {
		return true
	}
	g.remove(w)
	return false
}

func (g *gate) remove(w *waiting) {
	ws := g.byHost[w.host]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(g.byHost, w.host)
	} else {
		g.byHost[w.host] = ws
	}
	g.held--
}

// holding is how many connections the gate holds, and from how many
// addresses.
func (g *gate) holding() (conns, hosts int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, len(g.byHost)
}
