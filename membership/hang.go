package membership

import (
	"fmt"
	"strings"
	"time"

	"github.com/elastictraining/coordinator/english"
)

// DefaultMaxHangRestarts is a job's budget of restarts caused by a rank
// that hung, separate from MaxRestarts: a hang is the job's own or its
// machine's, and a job that hangs now and then must not spend the budget
// its crashes need.
const DefaultMaxHangRestarts = 10

// Hang is a node's report that one of its ranks made no progress for
// longer than its hang timeout, or was stopped (SIGSTOP) for more than
// half a second; in a stop plan, the report the leader took as the cause.
type Hang struct {
	// Node is the reporting node; empty in its own record.
	Node string `json:"node,omitempty"`
	// Generation is the generation the rank ran in.
	Generation int64 `json:"generation"`
	// Rank is the rank's global rank, within its role.
	Rank int `json:"rank"`
	// Step is the last step the rank made: the job's step, as it named it
	// (elastic.beat(step=N), a saved state's "step") or counted on from the
	// step it named or resumed from (elastic.load); else (Counted) its
	// process's own count of its optimizer steps, beats and saves.
	Step    int64 `json:"step"`
	Counted bool  `json:"counted,omitempty"`
	// Quiet is how long it had made no progress when found; Timeout is
	// the hang timeout that fired (half a second for a stopped process).
	Quiet   Duration `json:"quiet"`
	Timeout Duration `json:"timeout"`
	// Stopped says it was found stopped, not traced by a debugger.
	Stopped bool `json:"stopped,omitempty"`
	// LastActivity is its last sign of life, on the node's clock: of the
	// ranks that stalled together, the one whose last sign of life is
	// oldest hung; the others wait for it in a collective.
	LastActivity time.Time `json:"lastActivity,omitzero"`
}

// Validate reports the first field of h that is out of range.
func (h Hang) Validate() error {
	if h.Node != "" {
		if err := ValidateNodeID(h.Node); err != nil {
			return fmt.Errorf("hang: %w", err)
		}
	}
	if h.Generation < 1 || h.Rank < 0 || h.Step < 0 || h.Quiet < 0 || h.Timeout < 0 {
		return fmt.Errorf("hang: generation %d, rank %d, step %d: out of range", h.Generation, h.Rank, h.Step)
	}
	return nil
}

// String says what happened, for events and the status: "rank 1 on node
// w-1 made no progress for 2.1s (hang timeout 2s) after step 1234; stacks
// in its log".
func (h Hang) String() string {
	where := fmt.Sprintf("rank %d", h.Rank)
	if h.Node != "" {
		where += " on node " + h.Node
	}
	after := StepText("after", h.Step, h.Counted)
	if h.Stopped {
		return fmt.Sprintf("%s was stopped (SIGSTOP, not a debugger) for %s %s; stacks in its log", where, h.Quiet, after)
	}
	return fmt.Sprintf("%s made no progress for %s (hang timeout %s) %s; stacks in its log", where, h.Quiet, h.Timeout, after)
}

// StepText says where a rank is: "after step 1234" (the job's step);
// "after its 1200th step in this process (its own count: ...)" when the
// rank names no step of the job and step is its own count (counted);
// "before its first step".
// prep is the preposition: "after", "at".
func StepText(prep string, step int64, counted bool) string {
	switch {
	case step <= 0:
		return "before its first step"
	case counted:
		return fmt.Sprintf("%s its %s step in this process (its own count: it names no step of the job)", prep, english.Ordinal(step))
	}
	return fmt.Sprintf("%s step %d", prep, step)
}

// RankProgress is how the slowest of a node's ranks steps, refreshed
// every few seconds while they run: a straggler shows before it hangs.
type RankProgress struct {
	// Rank is the slowest rank's global rank.
	Rank int `json:"rank"`
	// Step is its last step (Counted: its process's own count, as in
	// Hang); StepTime the median of its recent step intervals.
	Step     int64    `json:"step"`
	Counted  bool     `json:"counted,omitempty"`
	StepTime Duration `json:"stepTime"`
	// HangTimeout is the node's hang timeout in force; 0 when watching is
	// off.
	HangTimeout Duration `json:"hangTimeout,omitempty"`
}

// HangWatch is how the ranks of a run plan are watched for hangs, from
// the spec and what the job's earlier generations taught the leader.
type HangWatch struct {
	// Timeout, when set, is the spec's hang timeout (0: watching off);
	// unset, the sidecars learn it from the job's step intervals.
	Timeout *Duration `json:"timeout,omitempty"`
	// Startup, when set, is the spec's budget before a generation's first
	// step (0: none); unset, the default.
	Startup *Duration `json:"startup,omitempty"`
	// AtLeast is the least a learned timeout may be: it grows after each
	// hang restart, so that a legitimate pause that cost one restart
	// passes the next time.
	AtLeast Duration `json:"atLeast,omitempty"`
	// Expect says the job's ranks are known to report progress: the
	// startup budget applies from a generation's start.
	Expect bool `json:"expect,omitempty"`
}

// ParseHangTimeout reads a hang or start-up timeout as users write it:
// "auto" (or "") for nil, the learned default; "0" for off; else a
// duration of at least least: the shortest the hang watch honours,
// which is the guard's to say (guard.MinHangTimeout), not the schema's.
func ParseHangTimeout(value string, least time.Duration) (*Duration, error) {
	v := strings.TrimSpace(value)
	switch v {
	case "auto", "":
		return nil, nil
	case "0":
		d := Duration(0)
		return &d, nil
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%q: want a duration such as 30s or 2m, 0 (off) or auto", value)
	case d < 0:
		return nil, fmt.Errorf("%s: must not be negative (0 turns it off)", value)
	case d > 0 && d < least:
		return nil, fmt.Errorf("%s: want %s or more, the least the hang watch honours; 0 (off) or auto", value, least)
	}
	md := Duration(d)
	return &md, nil
}
