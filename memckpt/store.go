package memckpt

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// TooLargeError is a state that does not fit the node's checkpoint memory.
type TooLargeError struct {
	// Size is the state's, Memory the node's bound; a copy may take at
	// most half of it.
	Size, Memory int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("a state of %s does not fit the node's checkpoint memory: a copy may take at most %s, half of its %s "+
		"(the newest complete copy stays while the next arrives); raise it with --checkpoint-memory or ELASTIC_CHECKPOINT_MEMORY on every node",
		FormatSize(e.Size), FormatSize(e.Memory/2), FormatSize(e.Memory))
}

// store holds the copies of one job, own and replicas, newest last, within
// its bounds.
type store struct {
	copies int
	memory int64

	mu   sync.Mutex
	used int64   // the held copies' bytes and the reservations'
	held []*Copy // oldest first
	// room is closed, and replaced, whenever bytes are given back.
	room chan struct{}
}

func newStore(copies int, memory int64) *store {
	return &store{copies: copies, memory: memory, room: make(chan struct{})}
}

// reservation is room for one copy while it arrives.
type reservation struct {
	s    *store
	size int64
	once sync.Once
}

// reserve makes room for a copy of size bytes, dropping the oldest copies
// but never the newest one, and waits while other arriving copies hold
// the rest.
func (s *store) reserve(ctx context.Context, size int64) (*reservation, error) {
	if size > s.memory/2 {
		return nil, &TooLargeError{Size: size, Memory: s.memory}
	}
	for {
		s.mu.Lock()
		for s.used+size > s.memory && len(s.held) > 1 {
			s.dropLocked(0)
		}
		if s.used+size <= s.memory {
			s.used += size
			s.mu.Unlock()
			return &reservation{s: s, size: size}, nil
		}
		room := s.room
		s.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// release gives the room back if it was not used by put. Safe to call
// more than once.
func (r *reservation) release() {
	r.once.Do(func() {
		r.s.mu.Lock()
		r.s.used -= r.size
		r.s.signalLocked()
		r.s.mu.Unlock()
	})
}

func (s *store) signalLocked() {
	close(s.room)
	s.room = make(chan struct{})
}

func (s *store) dropLocked(i int) {
	s.used -= int64(len(s.held[i].Body))
	s.held = slices.Delete(s.held, i, i+1)
	s.signalLocked()
}

// put enters a complete copy into the room r reserved for it, and keeps
// the newest copies. It reports whether c is held: not when it is older
// than all that are kept, or already held.
func (s *store) put(c *Copy, r *reservation) bool {
	held := false
	r.once.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		i := 0
		for i < len(s.held) && c.Newer(s.held[i].Meta) {
			i++
		}
		if i > 0 && s.held[i-1].same(c.Meta) {
			s.used -= r.size
			s.signalLocked()
			return
		}
		s.used += int64(len(c.Body)) - r.size
		s.held = slices.Insert(s.held, i, c)
		for len(s.held) > s.copies {
			s.dropLocked(0)
		}
		held = slices.Contains(s.held, c)
	})
	return held
}

// newest is the newest copy held whose node is node, or of any node if
// node is empty; nil if none.
func (s *store) newest(node string) *Copy {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.held) - 1; i >= 0; i-- {
		if node == "" || s.held[i].Node == node {
			return s.held[i]
		}
	}
	return nil
}

// usage is the bytes and copies held.
func (s *store) usage() (bytes int64, copies int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.held {
		bytes += int64(len(c.Body))
	}
	return bytes, len(s.held)
}
