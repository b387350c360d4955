package memckpt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// idleTimeout closes a peer connection that asks nothing for this long.
const idleTimeout = 5 * time.Minute

// servePeer answers one authenticated peer until it hangs up.
func (s *Service) servePeer(conn *tls.Conn) {
	for {
		_ = conn.SetReadDeadline(time.Now().Add(idleTimeout))
		var m Meta
		h, err := readFrame(conn, uint64(s.cfg.Memory), &m)
		if err != nil {
			return
		}
		switch h.Op {
		case OpPush:
			if !s.receive(conn, m, int64(h.BodyLen)) {
				return
			}
		case OpHead:
			c := s.store.newest("")
			r := Reply{}
			if c != nil {
				r = Reply{Found: true, Meta: &c.Meta}
			}
			if writeFrame(conn, OpReply, r, nil) != nil {
				return
			}
		case OpGet:
			c := s.store.newest("")
			var err error
			if c == nil {
				err = writeFrame(conn, OpReply, Reply{}, nil)
			} else {
				_ = conn.SetWriteDeadline(time.Now().Add(bodyTimeout))
				err = writeFrame(conn, OpReply, Reply{Found: true, Meta: &c.Meta}, c.Body)
				_ = conn.SetWriteDeadline(time.Time{})
			}
			if err != nil {
				return
			}
		default:
			_ = writeFrame(conn, OpReply, Reply{Error: fmt.Sprintf("op %d is not a peer's", h.Op), Kind: "error"}, nil)
			return
		}
	}
}

// receive keeps a replica a peer pushes. It enters the store only once
// all of it has arrived and matches its checksum: a peer that dies on the
// way leaves what was held before. It reports whether the connection may
// go on.
func (s *Service) receive(conn *tls.Conn, m Meta, size int64) bool {
	if err := m.Validate(); err != nil || m.Job != s.cfg.Job || m.Size != size {
		_ = writeFrame(conn, OpReply, Reply{Error: fmt.Sprintf("not a replica of job %s", s.cfg.Job), Kind: "error"}, nil)
		return false
	}
	ctx, cancel := context.WithTimeout(s.ctx, bodyTimeout)
	defer cancel()
	r, err := s.store.reserve(ctx, size)
	if err != nil {
		// The body follows the header unasked: the connection cannot go on.
		_ = writeFrame(conn, OpReply, refusal(err), nil)
		return false
	}
	defer r.release()
	body := make([]byte, size)
	_ = conn.SetReadDeadline(time.Now().Add(bodyTimeout))
	if _, err := io.ReadFull(conn, body); err != nil {
		s.logger.Debug("replica cut off", "generation", m.Generation, "seq", m.Seq, "error", err)
		return false
	}
	if err := m.verify(body); err != nil {
		_ = writeFrame(conn, OpReply, Reply{Error: err.Error(), Kind: "error"}, nil)
		return false
	}
	s.store.put(&Copy{Meta: m, Body: body}, r)
	return writeFrame(conn, OpReply, Reply{}, nil) == nil
}

// pushLoop replicates the newest own copy to the next node, one push at a
// time: saves made meanwhile wait as one, the newest.
func (s *Service) pushLoop() {
	var conn *tls.Conn
	var connAddr string
	var pushed Meta
	var to target
	// failing is the peer whose failure was last logged: a peer that is
	// down fails every save, and one warning says so.
	failing := ""
	warn := func(target string, args ...any) {
		if target == failing {
			s.logger.Debug("replica not pushed; trying the next node", append([]any{"peer", target}, args...)...)
			return
		}
		failing = target
		s.logger.Warn("replica not pushed; trying the next node (logged once until a push succeeds)", append([]any{"peer", target}, args...)...)
	}
	untrack := func() {}
	hangUp := func() {
		if conn != nil {
			untrack()
			conn = nil
		}
	}
	defer hangUp()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.pushKick:
		}
		c := s.store.newest(s.cfg.NodeID)
		if c == nil || c.same(pushed) {
			continue
		}
		target := s.replicaTarget(&to)
		if target == "" {
			continue
		}
		if connAddr != target {
			hangUp()
		}
		if conn == nil {
			ctx, cancel := context.WithTimeout(s.ctx, time.Second)
			var err error
			conn, err = s.auth.dial(ctx, target)
			cancel()
			if err != nil {
				warn(target, "error", err)
				conn = nil
				if to.skip(target) {
					s.stored()
				}
				continue
			}
			untrack = s.track(conn)
			connAddr = target
		}
		if err := push(conn, c); err != nil {
			warn(target, "generation", c.Generation, "seq", c.Seq, "error", err)
			hangUp()
			if to.skip(target) {
				s.stored()
			}
			continue
		}
		pushed, failing = c.Meta, ""
	}
}

// pushTimeout bounds a push of size bytes: a second, and a second more
// for every 32 MiB. A peer that takes longer is frozen, cut off or
// overloaded, and every save meanwhile would wait on it: the replica goes
// to the next node instead.
func pushTimeout(size int) time.Duration {
	return time.Second + time.Duration(size/(32<<20))*time.Second
}

// push sends c and waits for the peer to hold it.
func push(conn *tls.Conn, c *Copy) error {
	_ = conn.SetDeadline(time.Now().Add(pushTimeout(len(c.Body))))
	defer conn.SetDeadline(time.Time{})
	if err := writeFrame(conn, OpPush, c.Meta, c.Body); err != nil {
		return err
	}
	var r Reply
	if _, err := readFrame(conn, 0, &r); err != nil {
		return err
	}
	if r.Error != "" {
		return errors.New(r.Error)
	}
	return nil
}

// replicaTarget is the address of the node after this one in the rank
// order of the generation it runs (the first, if it is the last), or of
// the plan's first other node if this one is not a member; "" if none has
// an address. It is read from the node's record once a generation. When
// every member failed once (frozen, cut off) or none serves, a live node
// of the job outside the generation, a standby, takes the replica: the
// newest copy must not wait in one node's memory for a peer to come back.
func (s *Service) replicaTarget(t *target) string {
	gen, members := s.node.Members()
	if gen == t.generation && t.addr != "" {
		return t.addr
	}
	if gen != t.generation {
		t.generation, t.failed = gen, nil
	}
	t.addr = ""
	self := -1
	for i, m := range members {
		if m.Node == s.cfg.NodeID {
			self = i
		}
	}
	var first string
	for k := 1; k <= len(members); k++ {
		m := members[(self+k+len(members))%len(members)]
		if m.Node == s.cfg.NodeID {
			continue
		}
		addr := s.storeOf(s.ctx, m.Node)
		if addr == "" {
			continue
		}
		if first == "" {
			first = addr
		}
		if !t.failed[addr] {
			t.addr = addr
			break
		}
	}
	if t.addr == "" {
		for _, addr := range s.standbys(members) {
			if first == "" {
				first = addr
			}
			if !t.failed[addr] {
				t.addr = addr
				break
			}
		}
	}
	if t.addr == "" && first != "" {
		// Every peer failed once: start the round again, at the next save.
		t.failed, t.addr, t.lastOfRound = nil, first, true
	}
	return t.addr
}

// standbys are the addresses of the job's live nodes that serve
// checkpoints and are neither this node nor a member, in node id order.
func (s *Service) standbys(members []membership.Member) []string {
	stores := s.liveStores(s.ctx)
	delete(stores, s.cfg.NodeID)
	for _, m := range members {
		delete(stores, m.Node)
	}
	ids := slices.Sorted(maps.Keys(stores))
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = stores[id]
	}
	return out
}

// target is where the replicas of a generation go.
type target struct {
	generation int64
	addr       string
	// failed are the peers a push to failed in this generation: they are
	// passed over while another can take the replica.
	failed map[string]bool
	// lastOfRound: every other peer failed since this one was tried.
	lastOfRound bool
}

// skip passes over addr until the next generation or until every peer
// failed, and reports whether another peer is worth trying at once; after
// a whole round failed the next save tries again, so that peers that are
// all gone are not dialled in a loop.
func (t *target) skip(addr string) bool {
	if t.failed == nil {
		t.failed = map[string]bool{}
	}
	t.failed[addr], t.addr = true, ""
	again := !t.lastOfRound
	t.lastOfRound = false
	return again
}

// Load returns the newest copy of the job among this store's and the other
// live sidecars', or nil. A copy fetched from a peer is kept here too,
// room permitting, for the node's other trainers.
func (s *Service) Load(ctx context.Context) *Copy {
	best := s.store.newest("")
	var bestAddr string
	var bestMeta *Meta
	if best != nil {
		bestMeta = &best.Meta
	}
	heads := s.askPeers(ctx)
	for addr, m := range heads {
		if bestMeta == nil || m.Newer(*bestMeta) {
			bestAddr, bestMeta = addr, &m
		}
	}
	if bestAddr == "" {
		return best
	}
	c, err := s.fetch(ctx, bestAddr)
	if err != nil || (best != nil && !c.Newer(best.Meta)) {
		if err != nil {
			s.logger.Warn("checkpoint not fetched from a peer", "peer", bestAddr, "error", err)
		}
		return best
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if r, err := s.store.reserve(rctx, c.Size); err == nil {
		s.store.put(c, r)
	}
	return c
}

// askPeers asks every other live sidecar of the job for the Meta of its
// newest copy.
func (s *Service) askPeers(ctx context.Context) map[string]Meta {
	// A head is one small frame: a peer that has not answered within a
	// second is frozen or cut off, and the trainers of the next generation
	// wait on this load.
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]Meta{}
	for node, addr := range s.liveStores(ctx) {
		if node == s.cfg.NodeID || addr == "" || addr == s.addr {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := s.head(ctx, addr)
			if err != nil {
				s.logger.Debug("checkpoint peer not asked", "peer", addr, "error", err)
				return
			}
			if m != nil {
				mu.Lock()
				out[addr] = *m
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// head asks the sidecar at addr for the Meta of its newest copy.
func (s *Service) head(ctx context.Context, addr string) (*Meta, error) {
	conn, err := s.auth.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	if err := writeFrame(conn, OpHead, nil, nil); err != nil {
		return nil, err
	}
	var r Reply
	if _, err := readFrame(conn, 0, &r); err != nil {
		return nil, err
	}
	if r.Error != "" {
		return nil, errors.New(r.Error)
	}
	if !r.Found || r.Meta == nil {
		return nil, nil
	}
	return r.Meta, nil
}

// fetch gets the newest copy of the sidecar at addr.
func (s *Service) fetch(ctx context.Context, addr string) (*Copy, error) {
	conn, err := s.auth.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(bodyTimeout))
	if err := writeFrame(conn, OpGet, nil, nil); err != nil {
		return nil, err
	}
	var r Reply
	h, err := readFrame(conn, uint64(s.cfg.Memory), &r)
	if err != nil {
		return nil, err
	}
	if r.Error != "" || !r.Found || r.Meta == nil {
		return nil, fmt.Errorf("the peer holds no copy any more: %s", r.Error)
	}
	if err := r.Meta.Validate(); err != nil || r.Meta.Job != s.cfg.Job || r.Meta.Size != int64(h.BodyLen) {
		return nil, fmt.Errorf("the peer's copy is not one of job %s", s.cfg.Job)
	}
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, err
	}
	if err := r.Meta.verify(body); err != nil {
		return nil, err
	}
	return &Copy{Meta: *r.Meta, Body: body}, nil
}

// liveStores reads where each live node of the job serves checkpoints:
// one range read, when a trainer loads (a watch on every node from every
// sidecar would cost the job's etcd a multiple of its nodes for nothing).
func (s *Service) liveStores(ctx context.Context) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	prefix := s.cfg.Keys.Nodes(s.cfg.Job)
	resp, err := s.cfg.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		s.logger.Warn("the job's nodes not read; loading from this node only", "error", err)
		return nil
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		n, err := membership.DecodeNode(kv.Value)
		if err == nil && n.Checkpoint != "" && n.ID == string(kv.Key[len(prefix):]) {
			out[n.ID] = n.Checkpoint
		}
	}
	return out
}

// storeOf reads where node serves checkpoints; "" if it serves none or is
// gone.
func (s *Service) storeOf(ctx context.Context, node string) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := s.cfg.Client.Get(ctx, s.cfg.Keys.Node(s.cfg.Job, node))
	if err != nil || len(resp.Kvs) == 0 {
		return ""
	}
	n, err := membership.DecodeNode(resp.Kvs[0].Value)
	if err != nil {
		return ""
	}
	return n.Checkpoint
}

// PeerNewest asks the sidecar at addr, proving the job's secret, for the
// Meta of the newest copy it holds; nil if it holds none. It is how a
// tool (or a test) sees what a node would serve.
func PeerNewest(ctx context.Context, job string, secret []byte, addr string) (*Meta, error) {
	a, err := newAuth(job, secret)
	if err != nil {
		return nil, err
	}
	s := &Service{auth: a}
	return s.head(ctx, addr)
}
