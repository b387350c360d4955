package memckpt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/guard"
)

// bodyTimeout bounds the time a payload may take to arrive, so that a
// frozen sender does not hold its reservation for ever.
const bodyTimeout = 5 * time.Minute

// serveLocal accepts the node's trainers.
func (s *Service) serveLocal() {
	for {
		conn, err := s.local.AcceptUnix()
		if err != nil {
			return
		}
		untrack := s.track(conn)
		s.goRun(func() {
			defer untrack()
			if why := localPeerRefused(conn); why != "" {
				_ = writeFrame(conn, OpReply, Reply{Error: why, Kind: "error"}, nil)
				return
			}
			s.serveTrainer(conn)
		})
	}
}

// localPeerRefused says why the process at the other end may not use the
// store, or "" when it may: it must run as this sidecar's user, below it
// (under its guard).
func localPeerRefused(conn *net.UnixConn) string {
	raw, err := conn.SyscallConn()
	if err != nil {
		return "no peer credentials"
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return "no peer credentials"
	}
	if int(cred.Uid) != os.Getuid() {
		return "another user's process"
	}
	if !guard.IsDescendant(int(cred.Pid), os.Getpid()) {
		return "not a process of this sidecar"
	}
	return ""
}

// serveTrainer answers one trainer's requests until it hangs up.
func (s *Service) serveTrainer(conn *net.UnixConn) {
	for {
		var req SaveRequest
		h, err := readFrame(conn, 1<<62, &req)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				_ = writeFrame(conn, OpReply, Reply{Error: err.Error(), Kind: "error"}, nil)
			}
			return
		}
		switch h.Op {
		case OpSave:
			if !s.save(conn, req, int64(h.BodyLen)) {
				return
			}
		case OpLoad:
			if err := s.answerLoad(conn); err != nil {
				return
			}
		case OpPing:
			if h.BodyLen != 0 {
				_ = writeFrame(conn, OpReply, Reply{Error: "a ping has no body", Kind: "error"}, nil)
				return
			}
			reply := Reply{}
			if err := s.fence(req.Generation); err != nil {
				reply = refusal(err)
			}
			if err := writeFrame(conn, OpReply, reply, nil); err != nil {
				return
			}
		default:
			_ = writeFrame(conn, OpReply, Reply{Error: fmt.Sprintf("op %d is not a trainer's", h.Op), Kind: "error"}, nil)
			return
		}
	}
}

// refusal is the reply for err.
func refusal(err error) Reply {
	var tooLarge *TooLargeError
	switch {
	case errors.As(err, &tooLarge):
		return Reply{Error: err.Error(), Kind: "too_large"}
	case isFenced(err):
		return Reply{Error: err.Error(), Kind: "fenced"}
	}
	return Reply{Error: err.Error(), Kind: "error"}
}

// fencedError marks what the node's fence refused.
type fencedError struct{ err error }

func (e fencedError) Error() string { return e.err.Error() }
func (e fencedError) Unwrap() error { return e.err }

func isFenced(err error) bool {
	var f fencedError
	return errors.As(err, &f)
}

func (s *Service) fence(gen int64) error {
	if err := s.node.Fence(gen); err != nil {
		return fencedError{err}
	}
	return nil
}

// save stores one save: the fence and the room are checked before the
// payload is read, straight into the buffer it is kept in, and the fence
// again before it is held. It reports whether the connection may go on.
func (s *Service) save(conn *net.UnixConn, req SaveRequest, size int64) bool {
	if err := s.fence(req.Generation); err != nil {
		return writeFrame(conn, OpReply, refusal(err), nil) == nil
	}
	if req.Seq < 1 || req.Rank < 0 || (req.Path != "" && req.Path[0] != '/') {
		return writeFrame(conn, OpReply, Reply{Error: "bad save: want seq >= 1, rank >= 0 and an absolute path", Kind: "error"}, nil) == nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, bodyTimeout)
	defer cancel()
	r, err := s.store.reserve(ctx, size)
	if err != nil {
		return writeFrame(conn, OpReply, refusal(err), nil) == nil
	}
	defer r.release()
	if err := writeFrame(conn, OpReady, nil, nil); err != nil {
		return false
	}
	body := make([]byte, size)
	_ = conn.SetReadDeadline(time.Now().Add(bodyTimeout))
	if _, err := io.ReadFull(conn, body); err != nil {
		return false
	}
	_ = conn.SetReadDeadline(time.Time{})
	c := &Copy{Meta: Meta{Job: s.cfg.Job, Incarnation: s.incarnation, Generation: req.Generation, Seq: req.Seq, Rank: req.Rank, Node: s.cfg.NodeID,
		Path: req.Path, Size: size, CRC32: checksum(body)}, Body: body}
	// The generation may have ended while the payload arrived.
	if err := s.fence(req.Generation); err != nil {
		return writeFrame(conn, OpReply, refusal(err), nil) == nil
	}
	s.store.put(c, r)
	s.stored()
	return writeFrame(conn, OpReply, Reply{}, nil) == nil
}

// answerLoad sends the newest copy of the job.
func (s *Service) answerLoad(conn *net.UnixConn) error {
	c := s.Load(s.ctx)
	if c == nil {
		return writeFrame(conn, OpReply, Reply{}, nil)
	}
	return writeFrame(conn, OpReply, Reply{Found: true, Meta: &c.Meta}, c.Body)
}
