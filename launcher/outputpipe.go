package launcher

import (
	"io"
	"os"
	"sync"
	"time"
)

// outputPipe carries the guard's stdout or stderr to a writer and counts
// what it carried. The guard's exit reports travel on its socket, a channel
// of their own; an exit report says how many bytes of output came before
// it, and reached waits for them, so that a process's last line reaches the
// writer before its exit is passed on.
type outputPipe struct {
	mu     sync.Mutex
	copied int64
	done   bool
	moved  chan struct{} // closed and replaced whenever copied grows or done is set
}

// newOutputPipe returns the file the guard writes to; a writer that is a
// file is given to the guard as it is, with nothing to wait for.
func newOutputPipe(out io.Writer) (*outputPipe, *os.File, error) {
	if f, ok := out.(*os.File); ok {
		return nil, f, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	p := &outputPipe{moved: make(chan struct{})}
	go p.copy(r, out)
	return p, w, nil
}

func (p *outputPipe) copy(r *os.File, out io.Writer) {
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = out.Write(buf[:n])
			p.advance(int64(n), false)
		}
		if err != nil {
			p.advance(0, true)
			return
		}
	}
}

func (p *outputPipe) advance(n int64, done bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.copied += n
	p.done = p.done || done
	close(p.moved)
	p.moved = make(chan struct{})
}

// reached waits until n bytes were carried, the pipe closed, or timeout
// passed: output held up that long must not hold up the exit as well.
func (p *outputPipe) reached(n int64, timeout time.Duration) {
	if p == nil {
		return
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		ok, moved := p.copied >= n || p.done, p.moved
		p.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-moved:
		case <-deadline.C:
			return
		}
	}
}
