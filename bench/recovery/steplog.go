package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// step is one line "step <unix time> <generation> <rank> <world> <step>" of
// a trainer's log: the step it completed, and when.
type step struct {
	at    time.Time
	gen   string
	rank  int
	world int
	n     int
}

// proc is one trainer process's log: when it started (zero if its start
// line is not read yet), whether torch was imported already then (a warm
// interpreter), and its steps in order.
type proc struct {
	pid     int
	started time.Time
	warm    bool
	steps   []step
}

// start is a trainer's line "start <unix time> [warm|cold]": when it
// started, and whether torch was imported already (warm).
type start struct {
	at   time.Time
	warm bool
}

// parseLine reads one line of a trainer's log. A start line sets isStart;
// any other kind of line is an error.
func parseLine(line string) (s step, st start, isStart bool, err error) {
	f := strings.Fields(line)
	switch {
	case (len(f) == 2 || len(f) == 3 && (f[2] == "warm" || f[2] == "cold")) && f[0] == "start":
		at, err := parseUnix(f[1])
		return step{}, start{at: at, warm: len(f) == 3 && f[2] == "warm"}, true, err
	case len(f) == 6 && f[0] == "step":
		if s.at, err = parseUnix(f[1]); err != nil {
			return step{}, start{}, false, err
		}
		s.gen = f[2]
		ints := []*int{&s.rank, &s.world, &s.n}
		for i, p := range ints {
			if *p, err = strconv.Atoi(f[3+i]); err != nil {
				return step{}, start{}, false, fmt.Errorf("step line %q: %w", line, err)
			}
		}
		return s, start{}, false, nil
	}
	return step{}, start{}, false, fmt.Errorf("not a step log line: %q", line)
}

// parseUnix reads seconds since the epoch with a decimal fraction, exactly
// (a float64 would round the microseconds).
func parseUnix(s string) (time.Time, error) {
	whole, frac, _ := strings.Cut(s, ".")
	secs, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || len(frac) > 9 {
		return time.Time{}, fmt.Errorf("time %q: want seconds like 1700000000.123456", s)
	}
	nanos := int64(0)
	if frac != "" {
		if nanos, err = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("time %q: want seconds like 1700000000.123456", s)
		}
	}
	return time.Unix(secs, nanos), nil
}

// logs follows every trainer's log in a directory, reading only what was
// appended since the last poll: the harness polls often, and must not take
// the CPU the trainers are measured on.
type logs struct {
	dir   string
	off   map[string]int64
	rest  map[string][]byte
	procs map[int]*proc
}

func newLogs(dir string) *logs {
	return &logs{dir: dir, off: map[string]int64{}, rest: map[string][]byte{}, procs: map[int]*proc{}}
}

// poll reads what the trainers appended. A line not yet ended is kept for
// the next poll.
func (l *logs) poll() error {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		pid, err := strconv.Atoi(strings.TrimSuffix(name, ".log"))
		if err != nil || !strings.HasSuffix(name, ".log") {
			continue
		}
		data, err := readFrom(filepath.Join(l.dir, name), l.off[name])
		if err != nil {
			return err
		}
		l.off[name] += int64(len(data))
		data = append(l.rest[name], data...)
		end := bytes.LastIndexByte(data, '\n')
		l.rest[name] = bytes.Clone(data[end+1:])
		if end < 0 {
			continue
		}
		p := l.procs[pid]
		if p == nil {
			p = &proc{pid: pid}
			l.procs[pid] = p
		}
		for _, line := range strings.Split(string(data[:end]), "\n") {
			s, st, isStart, err := parseLine(line)
			switch {
			case err != nil:
				return fmt.Errorf("%s: %w", name, err)
			case isStart:
				p.started, p.warm = st.at, st.warm
			default:
				p.steps = append(p.steps, s)
			}
		}
	}
	return nil
}

func readFrom(path string, off int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// list returns the processes read so far.
func (l *logs) list() []*proc {
	out := make([]*proc, 0, len(l.procs))
	for _, p := range l.procs {
		out = append(out, p)
	}
	return out
}
