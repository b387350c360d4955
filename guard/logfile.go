package guard

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Log asks for a process's output to be kept in a file of its own, as
// well as (or instead of) the guard's stdout and stderr.
type Log struct {
	// Path is the file; its directory is created. Output is appended, so
	// that one file holds a rank's output over generations.
	Path string `json:"path"`
	// Header is written as a line of its own before the process starts
	// (the generation and the rank, for a reader of the file).
	Header string `json:"header,omitempty"`
	// MaxBytes bounds the file: past it, the file is renamed to Path.1
	// (replacing an older one) and a new one begun. 0: no bound.
	MaxBytes int64 `json:"maxBytes,omitempty"`
}

// logFile is a process's log file, shared by its stdout and stderr.
type logFile struct {
	mu   sync.Mutex
	log  Log
	f    *os.File
	size int64
}

// openLog opens l's file for appending and writes its header.
func openLog(l Log) (*logFile, error) {
	if err := os.MkdirAll(filepath.Dir(l.Path), 0o755); err != nil {
		return nil, err
	}
	lf := &logFile{log: l}
	if err := lf.open(); err != nil {
		return nil, err
	}
	if l.Header != "" {
		lf.writeLine([]byte(fmt.Sprintf("==== %s, %s ====", l.Header, time.Now().UTC().Format(time.RFC3339))))
	}
	return lf, nil
}

func (l *logFile) open() error {
	f, err := os.OpenFile(l.log.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, st.Size()
	return nil
}

// writeLine appends one line, and rotates the file once it is past its
// bound. A write that fails is dropped: a full disk must not stop the
// training process, whose output still reaches the terminal if teed.
func (l *logFile) writeLine(line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	n, _ := l.f.Write(buf)
	l.size += int64(n)
	if l.log.MaxBytes > 0 && l.size >= l.log.MaxBytes {
		l.f.Close()
		l.f = nil
		_ = os.Rename(l.log.Path, l.log.Path+".1")
		_ = l.open()
	}
}

// finish writes a last line saying how the process ended, and closes.
func (l *logFile) finish(how string) {
	l.writeLine([]byte("==== " + how + " ===="))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
