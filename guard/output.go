package guard

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
)

// maxLine is the longest line held back waiting for its newline; a longer
// one is written in pieces.
const maxLine = 64 << 10

// lineWriter writes whole lines to out, each with a prefix, holding back a
// partial line until its newline arrives. Lines from the writers sharing mu
// never interleave.
type lineWriter struct {
	mu  *sync.Mutex
	buf []byte

	// where is held while out, prefix and file are read or changed: a warm
	// interpreter's output changes place when it becomes a trainer.
	where  sync.Mutex
	out    io.Writer // nil: lines go to the file only
	prefix []byte
	file   *logFile // lines go here too, without the prefix
}

func newLineWriter(mu *sync.Mutex, out io.Writer, prefix string, file *logFile) *lineWriter {
	return &lineWriter{mu: mu, out: out, prefix: []byte(prefix), file: file}
}

// Write implements io.Writer. It never fails: output the terminal cannot take
// must not kill the training process.
func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) >= maxLine {
				w.emit(w.buf)
				w.buf = w.buf[:0]
			}
			return len(p), nil
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// Flush writes a last line without a newline.
func (w *lineWriter) Flush() {
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = nil
	}
}

// set changes where the next lines go.
func (w *lineWriter) set(out io.Writer, prefix string, file *logFile) {
	w.where.Lock()
	defer w.where.Unlock()
	w.out, w.prefix, w.file = out, []byte(prefix), file
}

func (w *lineWriter) emit(line []byte) {
	w.where.Lock()
	defer w.where.Unlock()
	if w.file != nil {
		w.file.writeLine(line)
	}
	if w.out == nil {
		return
	}
	out := make([]byte, 0, len(w.prefix)+len(line)+1)
	out = append(append(append(out, w.prefix...), line...), '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.out.Write(out)
}

// countingWriter counts the bytes written to out, so that an exit report can
// say how much output came before it: the launcher reads the output on
// another channel and waits until it has that much before passing the exit
// on, so a process's last line is never reported after its exit.
type countingWriter struct {
	out io.Writer
	n   atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.out.Write(p)
	w.n.Add(int64(n))
	return n, err
}
