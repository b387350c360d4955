package tcpproxy

import (
	"net"
	"sync"
)

// mode is what the proxy does with the bytes it reads.
type mode int

const (
	forward mode = iota
	drop         // a partition: nothing gets through, nothing is refused
	hold         // a stall: bytes wait until the link is resumed
)

// Proxy forwards connections from its address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	mode  mode
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Start listens on a free localhost port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is host:port to connect to instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every byte in both directions from now on, on open and new
// connections alike, without closing anything.
func (p *Proxy) Cut() { p.set(drop) }

// Hold keeps every byte back until Resume or Cut.
func (p *Proxy) Hold() { p.set(hold) }

// Resume forwards again, held bytes first.
func (p *Proxy) Resume() { p.set(forward) }

// Heal ends a cut: the connections that lost bytes are closed, as their
// peers would find after a partition, and new ones are forwarded.
func (p *Proxy) Heal() {
	p.mu.Lock()
	wasCut := p.mode == drop
	p.mode = forward
	if wasCut {
		for c := range p.conns {
			_ = c.Close()
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mode = forward
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) set(m mode) {
	p.mu.Lock()
	p.mode = m
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(server, client)
		go p.pipe(client, server)
	}
}

// pipe copies from src to dst as the mode says, and closes both at the end.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && p.pass() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pass waits while the link is held and reports whether to forward.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.mode == hold {
		p.cond.Wait()
	}
	return p.mode == forward
}
