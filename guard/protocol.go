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
	// With Stacks, each process's Python stack is written first and then
	// everything is killed at once: a stop because of a hang. With a grace
	// period and a Watch, a rank that is blocked (no sign of life since well
	// before the stop) has its stack written and is killed at once, while
	// the others get SIGTERM and the grace period.
	OpStop Op = "stop"
	// OpKill kills everything at once and refuses starts until the next
	// deadline: the node has been fenced out.
	OpKill Op = "kill"
	// OpWarm sets the warm interpreters the guard keeps ready, one per
	// local process slot (Warm); an empty list ends them. They are started
	// in the background, only while the node is not fenced.
	OpWarm Op = "warm"
	// OpSpare sets the started spares the guard keeps, one per local
	// process slot (Spares, Rank the slot): the command itself, started
	// ahead with EnvSpare set and no rank, which runs its start-up and
	// waits in elastic.run, parked (inplace.go), until a start hands it a
	// generation. An empty list keeps none. For in-place trainers only.
	OpSpare Op = "spare"
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
	// Watch, with OpStart: how the generation's processes are watched for
	// hangs; nil watches nothing.
	Watch *Watch `json:"watch,omitempty"`
	// Stacks, with OpStop: write every process's Python stack, then kill
	// at once, without a grace period.
	Stacks bool `json:"stacks,omitempty"`
	// Warm, with OpWarm: the template of each slot's warm interpreter.
	Warm []Warm `json:"warm,omitempty"`
	// Spares, with OpSpare: the command of each slot's started spare.
	Spares []Proc `json:"spares,omitempty"`
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

// Watch says how a generation's processes are watched for hangs (EventHung).
// A process found stopped (state T, not traced) for more than half a second is
// hung whatever the timeouts; a rank that reports progress on its page is
// hung once it was quiet for longer than the timeout in force.
type Watch struct {
	// TimeoutNanos is how long a rank that has stepped may be quiet: > 0 a
	// fixed timeout, 0 no quiet watching, WatchLearned (-1) learned from the
	// step intervals the guard saw, in every generation it ran.
	TimeoutNanos int64 `json:"timeoutNanos"`
	// StartupNanos is how long a generation's rank may take to its first
	// step, in the same encoding. It applies only where the job is known to
	// report progress: Expect, or a step seen in an earlier generation.
	StartupNanos int64 `json:"startupNanos"`
	// AtLeastNanos is a lower bound of the learned timeout: the job's
	// timeout, grown after a restart for a hang.
	AtLeastNanos int64 `json:"atLeastNanos,omitempty"`
	// Expect says that the job reports progress: the startup budget applies
	// even before this guard saw a step.
	Expect bool `json:"expect,omitempty"`
}

// WatchLearned, as Watch.TimeoutNanos or Watch.StartupNanos, has the guard
// learn the limit from what it saw.
const WatchLearned = -1

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
	if c.Watch != nil && c.Op != OpStart {
		return fmt.Errorf("guard command %d: a watch with %q", c.Seq, c.Op)
	}
	if c.Stacks && c.Op != OpStop {
		return fmt.Errorf("guard command %d: stacks with %q", c.Seq, c.Op)
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
		if w := c.Watch; w != nil && (w.TimeoutNanos < WatchLearned || w.StartupNanos < WatchLearned || w.AtLeastNanos < 0) {
			return fmt.Errorf("guard command %d: watch: a timeout below -1 or a negative lower bound", c.Seq)
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
	case OpSpare:
		if len(c.Spares) > MaxProcs {
			return fmt.Errorf("guard command %d: more than %d spare slots", c.Seq, MaxProcs)
		}
		seen := map[int]bool{}
		for _, p := range c.Spares {
			if p.Rank < 0 || p.Rank >= MaxProcs || seen[p.Rank] {
				return fmt.Errorf("guard command %d: spare slot %d out of range or given twice", c.Seq, p.Rank)
			}
			seen[p.Rank] = true
			if len(p.Argv) == 0 || p.Argv[0] == "" {
				return fmt.Errorf("guard command %d: spare slot %d has no command", c.Seq, p.Rank)
			}
		}
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
	// EventHung: the process of rank Rank (Pid, as started) of generation
	// Generation hangs: it was quiet for QuietNanos, longer than
	// TimeoutNanos, at step Step; or, Stopped, it was found stopped for
	// more than half a second (TimeoutNanos). Sent once per rank and
	// generation; the guard does not act on it.
	EventHung Event = "hung"
	// EventProgress: about once a second while the ranks of generation
	// Generation step, how far each is (Progress) and the hang timeout in
	// force (TimeoutNanos; 0 while none is). Final: once the run's last
	// process is reaped, how far each rank that stepped got, read from
	// its page as it was reaped; sent before the run's EventClear.
	EventProgress Event = "progress"
	// EventParked: the process Pid of slot Slot is parked (inplace.go):
	// it holds no rank and waits for the node's next start, which it
	// becomes without starting again. Generation is the one it left when
	// its stop asked it to (Rank its rank there); 0 for a started spare
	// that finished its start-up.
	EventParked Event = "parked"
	// EventUnparked: slot Slot's parked trainer Pid is parked no more: a
	// start made it a rank, or it was killed or exited.
	EventUnparked Event = "unparked"
	// EventSpareLost: slot Slot's started spare Pid exited (Code, Signal)
	// before it reached elastic.run; the slot gets no other until the
	// spares are set again.
	EventSpareLost Event = "spareLost"
)

// RankProgress is how far one rank is.
type RankProgress struct {
	Rank int `json:"rank"`
	// Steps counts its progress events in this generation; Step is the step
	// it last named, Steps where it names none (Counted).
	Steps   int64 `json:"steps"`
	Step    int64 `json:"step"`
	Counted bool  `json:"counted,omitempty"`
	// IntervalNanos is the median of its recent step intervals,
	// MaxIntervalNanos its longest in this generation.
	IntervalNanos    int64 `json:"intervalNanos"`
	MaxIntervalNanos int64 `json:"maxIntervalNanos"`
	// QuietUntilUnixNanos, when not 0, is the end of the last long phase
	// the rank declared (elastic.quiet), on the wall clock: as declared
	// while it lasts, as it happened once over. Its peers, waiting for it
	// in a collective, are not hung before then.
	QuietUntilUnixNanos int64 `json:"quietUntilUnixNanos,omitempty"`
	// Hung says the rank was reported hung and has not stepped since: one
	// that steps again is reported so, and may be reported hung again.
	Hung bool `json:"hung,omitempty"`
	// FirstStepUnixNanos and LastStepUnixNanos are the wall clock times
	// of its first and last steps in this generation; FirstNamed is the
	// first step it named, at FirstNamedUnixNanos. 0 for none.
	FirstStepUnixNanos  int64 `json:"firstStepUnixNanos,omitempty"`
	LastStepUnixNanos   int64 `json:"lastStepUnixNanos,omitempty"`
	FirstNamed          int64 `json:"firstNamed,omitempty"`
	FirstNamedUnixNanos int64 `json:"firstNamedUnixNanos,omitempty"`
}

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
	// Slot, with EventParked, EventUnparked and EventSpareLost: the local
	// process slot.
	Slot int `json:"slot,omitempty"`
	// InPlace, with EventStarted, is how many of the processes were
	// parked trainers of an earlier generation, started again in place.
	InPlace int `json:"inPlace,omitempty"`
	// Began, with EventStarted where the guard keeps started spares (the
	// command trains in place), says by slot how each process began the
	// generation: BeganInPlace, BeganSpare, BeganSpareStarting, or
	// BeganCold and why: what the user reads to learn what a fault cost.
	Began []string `json:"began,omitempty"`
	// StdoutBytes and StderrBytes are how much the guard had written to its
	// stdout and stderr when it sent an exit report.
	StdoutBytes int64 `json:"stdout_bytes,omitempty"`
	StderrBytes int64 `json:"stderr_bytes,omitempty"`
	// Generation, Step (Counted: the process's count of its progress
	// events, as it names no step), QuietNanos, TimeoutNanos, Stopped and
	// LastActivityUnixNanos (the wall clock time of the rank's last sign of
	// life; 0 for none) describe a hang, with EventHung; Generation,
	// Progress and TimeoutNanos with EventProgress.
	Generation            int64          `json:"generation,omitempty"`
	Step                  int64          `json:"step,omitempty"`
	Counted               bool           `json:"counted,omitempty"`
	QuietNanos            int64          `json:"quietNanos,omitempty"`
	TimeoutNanos          int64          `json:"timeoutNanos,omitempty"`
	Stopped               bool           `json:"stopped,omitempty"`
	LastActivityUnixNanos int64          `json:"lastActivityUnixNanos,omitempty"`
	Progress              []RankProgress `json:"progress,omitempty"`
	Final                 bool           `json:"final,omitempty"`
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
	case EventParked, EventUnparked, EventSpareLost:
		if r.Pid <= 0 || r.Generation < 0 || r.Slot < 0 || r.Slot >= MaxProcs {
			return Report{}, fmt.Errorf("%w: %s report without a process or a slot", ErrInvalidMessage, r.Event)
		}
	case EventHung:
		if r.Pid <= 0 || r.Generation < 1 || r.TimeoutNanos <= 0 || r.QuietNanos < 0 || r.Step < 0 {
			return Report{}, fmt.Errorf("%w: hung report without a process, a generation or a timeout", ErrInvalidMessage)
		}
	case EventProgress:
		if r.Generation < 1 || len(r.Progress) == 0 || len(r.Progress) > MaxProcs || r.TimeoutNanos < 0 {
			return Report{}, fmt.Errorf("%w: progress report without a generation or 1..%d ranks", ErrInvalidMessage, MaxProcs)
		}
		for _, p := range r.Progress {
			if p.Steps < 0 || p.Step < 0 || p.IntervalNanos < 0 || p.MaxIntervalNanos < 0 || p.FirstNamed < 0 {
				return Report{}, fmt.Errorf("%w: progress of rank %d: a negative count or interval", ErrInvalidMessage, p.Rank)
			}
		}
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

// How a slot's process began a generation (Report.Began).
const (
	// BeganInPlace: a survivor's process, trained in an earlier generation.
	BeganInPlace = "in place"
	// BeganSpare: a started spare whose start-up was done.
	BeganSpare = "started spare"
	// BeganSpareStarting: a started spare still in its start-up, which it
	// finishes as the rank.
	BeganSpareStarting = "started spare, still starting"
	// BeganCold starts the reason of a process started anew: "cold: why".
	BeganCold = "cold"
)
