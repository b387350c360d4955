package guard

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Op is what a Command asks of the guard.
type Op string

// Commands from the sidecar to the guard.
const (
	// OpDeadline sets the lease the processes run under and the time by
	// which they must be dead unless the deadline is extended again.
	OpDeadline Op = "deadline"
	// OpStart starts a generation's processes. The guard refuses while any
	// process of the previous one is left, or when the lease is not current
	// or its deadline has passed.
	OpStart Op = "start"
	// OpStop sends SIGTERM to each process group and, after the grace
	// period, kills what is left. A deadline already passed makes it a kill.
	OpStop Op = "stop"
	// OpKill kills everything at once and refuses starts until the next
	// deadline: the node has been fenced out.
	OpKill Op = "kill"
	// OpWarm sets the warm interpreters the guard keeps ready, one per
	// local process slot (Warm); an empty list ends them. They are started
	// in the background, only while the node is not fenced.
	OpWarm Op = "warm"
)

// Command is one message from the sidecar to the guard, one JSON object per
// line.
type Command struct {
	// Seq numbers the commands; reports name the last one processed.
	Seq int64 `json:"seq"`
	Op  Op    `json:"op"`
	// Lease and KillAt, with OpDeadline and OpStart: the lease and the
	// CLOCK_MONOTONIC time in nanoseconds by which the processes must be
	// dead.
	Lease  int64 `json:"lease,omitempty"`
	KillAt int64 `json:"killAt,omitempty"`
	// GraceNanos is OpStop's grace period.
	GraceNanos int64 `json:"graceNanos,omitempty"`
	// Generation and Procs, with OpStart.
	Generation int64  `json:"generation,omitempty"`
	Procs      []Proc `json:"procs,omitempty"`
	// Warm, with OpWarm: the template of each slot's warm interpreter.
	Warm []Warm `json:"warm,omitempty"`
}

// Warm is the template of one local process slot's warm interpreter: the
// command as OpStart will ask for it, and what to preload. A start of the
// slot with the same Path, Argv and Dir uses the warm interpreter.
type Warm struct {
	// Slot is the local rank: the index of the process in OpStart's Procs.
	Slot int `json:"slot"`
	// Path, Argv and Dir are the command, as in Proc; Argv[0] must name a
	// Python interpreter (ParsePython).
	Path string   `json:"path,omitempty"`
	Argv []string `json:"argv"`
	Dir  string   `json:"dir,omitempty"`
	// Env is the environment the interpreter starts with: the sidecar's
	// base, without a generation's variables, which it is given when used.
	Env []string `json:"env"`
	// Prefix starts every line the interpreter writes before it is used,
	// on the guard's stderr.
	Prefix string `json:"prefix"`
	// Preload are the modules it imports before it waits.
	Preload []string `json:"preload"`
}

// Proc is one process to start: a local rank of the node.
type Proc struct {
	Rank int `json:"rank"`
	// Path is the program to run, resolved by the sidecar; Argv[0] if
	// empty.
	Path string   `json:"path,omitempty"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir,omitempty"`
	// Prefix starts every line of the process's output.
	Prefix string `json:"prefix"`
	// Log, when set, keeps the process's output in a file too.
	Log *Log `json:"log,omitempty"`
	// Quiet keeps the output off the guard's stdout and stderr: it goes
	// to the log file only.
	Quiet bool `json:"quiet,omitempty"`
}

// MaxProcs is the most processes one start may ask for.
const MaxProcs = 1024

// Validate reports the first field of c that is out of range.
func (c Command) Validate() error {
	if c.Seq < 1 {
		return fmt.Errorf("guard command: seq %d: want >= 1", c.Seq)
	}
	switch c.Op {
	case OpDeadline:
		if c.Lease == 0 || c.KillAt <= 0 {
			return fmt.Errorf("guard command %d: deadline without a lease or a time", c.Seq)
		}
	case OpStart:
		if c.Lease == 0 || c.Generation < 1 || len(c.Procs) == 0 || len(c.Procs) > MaxProcs {
			return fmt.Errorf("guard command %d: start needs a lease, a generation and 1..%d processes", c.Seq, MaxProcs)
		}
		for _, p := range c.Procs {
			if len(p.Argv) == 0 || p.Argv[0] == "" {
				return fmt.Errorf("guard command %d: rank %d has no command", c.Seq, p.Rank)
			}
			if p.Log != nil && (p.Log.Path == "" || p.Log.MaxBytes < 0) {
				return fmt.Errorf("guard command %d: rank %d's log has no path or a negative bound", c.Seq, p.Rank)
			}
		}
	case OpStop:
		if c.GraceNanos < 0 {
			return fmt.Errorf("guard command %d: negative grace period", c.Seq)
		}
	case OpKill:
	case OpWarm:
		if len(c.Warm) > MaxProcs {
			return fmt.Errorf("guard command %d: more than %d warm slots", c.Seq, MaxProcs)
		}
		seen := map[int]bool{}
		for _, w := range c.Warm {
			if w.Slot < 0 || w.Slot >= MaxProcs || seen[w.Slot] {
				return fmt.Errorf("guard command %d: warm slot %d out of range or given twice", c.Seq, w.Slot)
			}
			seen[w.Slot] = true
			if _, err := ParsePython(w.Argv); err != nil {
				return fmt.Errorf("guard command %d: warm slot %d: %w", c.Seq, w.Slot, err)
			}
			if len(w.Preload) == 0 {
				return fmt.Errorf("guard command %d: warm slot %d preloads nothing", c.Seq, w.Slot)
			}
			for _, m := range w.Preload {
				if !ValidModule(m) {
					return fmt.Errorf("guard command %d: warm slot %d: %q is not a module name", c.Seq, w.Slot, m)
				}
			}
		}
	default:
		return fmt.Errorf("guard command %d: unknown op %q", c.Seq, c.Op)
	}
	return nil
}

// Event is what a Report tells.
type Event string

// Reports from the guard to the sidecar.
const (
	// EventReady: the guard runs; Pid is its process id and Cgroup the
	// cgroup its processes go to, if any.
	EventReady Event = "ready"
	// EventStarted answers OpStart with the processes' ids in rank order.
	EventStarted Event = "started"
	// EventStartFailed answers OpStart that started nothing.
	EventStartFailed Event = "startFailed"
	// EventExit: the process of a rank exited; Code is its exit code, or
	// 128+Signal when a signal killed it.
	EventExit Event = "exit"
	// EventClear: no process is left below the guard.
	EventClear Event = "clear"
	// EventFenced: the deadline passed and the guard killed everything on
	// its own.
	EventFenced Event = "fenced"
	// EventWarm: a warm interpreter started for slot Rank; Pid is its
	// process id.
	EventWarm Event = "warm"
	// EventWarmReady: the warm interpreter Pid of slot Rank has imported
	// its preloads and waits for its go message.
	EventWarmReady Event = "warmReady"
	// EventWarmLost: slot Rank has no warm interpreter and gets none (its
	// interpreter failed to start or exited by itself): it starts cold.
	EventWarmLost Event = "warmLost"
)

// Report is one message from the guard to the sidecar.
type Report struct {
	Event Event `json:"event"`
	// Seq is the command answered, or the last command processed.
	Seq int64 `json:"seq"`
	// Lease is the lease whose deadline passed, with EventFenced.
	Lease  int64  `json:"lease,omitempty"`
	Pid    int    `json:"pid,omitempty"`
	Pids   []int  `json:"pids,omitempty"`
	Rank   int    `json:"rank,omitempty"`
	Code   int    `json:"code,omitempty"`
	Signal int    `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
	Cgroup string `json:"cgroup,omitempty"`
	// Warm, with EventStarted, is how many of the processes were warm
	// interpreters.
	Warm int `json:"warm,omitempty"`
	// StdoutBytes and StderrBytes are how much the guard had written to its
	// stdout and stderr when it sent an exit report.
	StdoutBytes int64 `json:"stdout_bytes,omitempty"`
	StderrBytes int64 `json:"stderr_bytes,omitempty"`
}

// ErrInvalidMessage wraps every decoding error.
var ErrInvalidMessage = errors.New("guard: invalid message")

// DecodeCommand reads one command line.
func DecodeCommand(line []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(line, &c); err != nil {
		return Command{}, fmt.Errorf("%w: %v", ErrInvalidMessage, err)
	}
	if err := c.Validate(); err != nil {
		return Command{}, fmt.Errorf("%w: %v", ErrInvalidMessage, err)
	}
	return c, nil
}

// DecodeReport reads one report line.
func DecodeReport(line []byte) (Report, error) {
	var r Report
	if err := json.Unmarshal(line, &r); err != nil {
		return Report{}, fmt.Errorf("%w: %v", ErrInvalidMessage, err)
	}
	switch r.Event {
	case EventReady, EventStarted, EventStartFailed, EventExit, EventClear, EventFenced, EventWarm, EventWarmReady, EventWarmLost:
	default:
		return Report{}, fmt.Errorf("%w: unknown event %q", ErrInvalidMessage, r.Event)
	}
	if r.Seq < 0 || r.Pid < 0 {
		return Report{}, fmt.Errorf("%w: negative seq or pid", ErrInvalidMessage)
	}
	return r, nil
}

// encodeLine is v as one JSON line.
func encodeLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// EncodeCommand is c as one line of the protocol.
func EncodeCommand(c Command) ([]byte, error) { return encodeLine(c) }
