package guard

import (
	"bufio"
	"io"
	"os"
	"sync"
)

// readCommands delivers the sidecar's commands; the channel closes when the
// socket does. A malformed line is a broken sidecar: it closes too.
func readCommands(f *os.File) <-chan Command {
	out := make(chan Command)
	go func() {
		defer close(out)
		r := bufio.NewReaderSize(f, 64<<10)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			c, err := DecodeCommand(line)
			if err != nil {
				return
			}
			out <- c
		}
	}()
	return out
}

// reportWriter sends reports in order without ever blocking the loop: a
// frozen sidecar does not read its socket.
type reportWriter struct {
	mu    sync.Mutex
	queue []Report
	wake  chan struct{}
	done  chan struct{}
	w     io.Writer
}

func newReportWriter(w io.Writer) *reportWriter {
	rw := &reportWriter{w: w, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go rw.loop()
	return rw
}

func (rw *reportWriter) send(r Report) {
	rw.mu.Lock()
	rw.queue = append(rw.queue, r)
	rw.mu.Unlock()
	select {
	case rw.wake <- struct{}{}:
	default:
	}
}

func (rw *reportWriter) loop() {
	for {
		select {
		case <-rw.wake:
		case <-rw.done:
			return
		}
		rw.mu.Lock()
		batch := rw.queue
		rw.queue = nil
		rw.mu.Unlock()
		for _, r := range batch {
			line, err := encodeLine(r)
			if err != nil {
				continue
			}
			if _, err := rw.w.Write(line); err != nil {
				return // the sidecar is gone; the loop sees the socket close
			}
		}
	}
}

func (rw *reportWriter) close() { close(rw.done) }
