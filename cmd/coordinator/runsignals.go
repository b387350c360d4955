//go:build !sidecaronly

package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// runSignals is what run was told by signals: the first one cancels the
// context, a second one asks for the nodes to be killed at once.
type runSignals struct {
	mu     sync.Mutex
	sig    syscall.Signal
	again  chan struct{}
	cancel context.CancelFunc
	stop   func()
}

func (s *runSignals) first() syscall.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sig
}

// outputGone stops the job as a first SIGPIPE would, but is never the
// second signal that kills the nodes at once: a write to a reader that has
// gone is not a person asking.
func (s *runSignals) outputGone() {
	s.mu.Lock()
	first := s.sig == 0
	if first {
		s.sig = syscall.SIGPIPE
	}
	s.mu.Unlock()
	if first {
		s.cancel()
	}
}

// signalContext is ctx, cancelled at the first SIGINT or SIGTERM, or once
// run's output has gone (outputGone).
func signalContext(parent context.Context) (context.Context, *runSignals) {
	ctx, cancel := context.WithCancel(parent)
	s := &runSignals{again: make(chan struct{}), cancel: cancel}
	ch := make(chan os.Signal, 2)
	// Asked for, SIGPIPE no longer ends the process at a write to a
	// broken standard output: the write fails with EPIPE, which
	// pipeOutput sees. The signal itself says nothing of which output
	// broke (any socket's peer that went, the embedded etcd's client's
	// say), so it is dropped.
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-ch:
				if sig == syscall.SIGPIPE {
					continue
				}
				s.mu.Lock()
				first := s.sig == 0
				if first {
					s.sig = sig.(syscall.Signal)
				}
				s.mu.Unlock()
				if first {
					cancel()
				} else {
					close(s.again)
					return
				}
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel()
		})
	}
	return ctx, s
}

// pipeOutput is one of run's outputs: once its reader has gone (EPIPE),
// it says so (gone) and drops what is written, so that the ranks' output,
// which run copies here, never blocks nor breaks the nodes while they stop.
type pipeOutput struct {
	w      io.Writer
	gone   func()
	broken atomic.Bool
}

func (p *pipeOutput) Write(b []byte) (int, error) {
	if p.broken.Load() {
		return len(b), nil
	}
	n, err := p.w.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		if !p.broken.Swap(true) {
			p.gone()
		}
		return len(b), nil
	}
	return n, err
}
