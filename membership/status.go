package membership

import (
	"encoding/json"
	"fmt"
	"time"
)

// JobPhase is the phase of a job as a whole.
type JobPhase string

// Job phases.
const (
	// JobWaiting: not enough nodes for the target np.
	JobWaiting JobPhase = "Waiting"
	// JobRestarting: a generation is being stopped or started.
	JobRestarting JobPhase = "Restarting"
	// JobRunning: every member of the current generation runs.
	JobRunning JobPhase = "Running"
	// JobSuspended: the spec suspends the job and no generation runs.
	JobSuspended JobPhase = "Suspended"
	// JobSucceeded and JobFailed are final.
	JobSucceeded JobPhase = "Succeeded"
	JobFailed    JobPhase = "Failed"
)

// Done reports whether p is final.
func (p JobPhase) Done() bool { return p == JobSucceeded || p == JobFailed }

// Duration is a time.Duration that reads and writes JSON as "1.5s".
type Duration time.Duration

// String renders d rounded to the millisecond below a minute.
func (d Duration) String() string {
	v := time.Duration(d)
	if v < time.Minute {
		v = v.Round(time.Millisecond)
	}
	return v.String()
}

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(data, &n); err != nil {
		return fmt.Errorf("duration %s: want a string like \"1.5s\" or nanoseconds", data)
	}
	*d = Duration(n)
	return nil
}

// Steps are the durations of one generation's protocol steps.
type Steps struct {
	// Detect: from the change being seen to phase stop committed.
	Detect Duration `json:"detect"`
	// Stop: from phase stop committed to the last ack.
	Stop Duration `json:"stop"`
	// Wait: from the last ack to phase run committed (waiting for nodes,
	// settling).
	Wait Duration `json:"wait"`
	// Start: from phase run committed to every member running.
	Start Duration `json:"start"`
	// Total: from the change being seen to every member running.
	Total Duration `json:"total"`
}

// Status is a job's state for people and tools, at Keys.Status, written by
// the coordinator leader.
type Status struct {
	Phase JobPhase `json:"phase"`
	// Generation is the generation running or being formed; once the job
	// ended, the last that ran (the final plan, one past it, only stops
	// the sidecars).
	Generation int64 `json:"generation"`
	// NP is the target from the spec.
	NP NP `json:"np"`
	// Members is the number of nodes in the current generation. Ready is,
	// while Running, the members running or done; while Waiting, the live
	// workers; while Restarting, 0: the status changes only between phases,
	// and the progress of a restart is in the node records.
	Members int `json:"members"`
	// Workers are the generation's members that are workers: what np
	// counts.
	Workers   int `json:"workers,omitempty"`
	Ready     int `json:"ready"`
	WorldSize int `json:"worldSize"`
	Restarts  int `json:"restarts"`
	// Interruptions are the restarts a fault caused, charged or not
	// (Plan.Interruptions).
	Interruptions int `json:"interruptions,omitempty"`
	// HangRestarts are the restarts hung ranks caused, of the spec's
	// MaxHangRestarts (Plan.HangRestarts).
	HangRestarts int    `json:"hangRestarts,omitempty"`
	Message      string `json:"message,omitempty"`
	// Malformed says which of the job's records do not decode or are
	// invalid, and why; the last good value of each stands meanwhile.
	Malformed string `json:"malformed,omitempty"`
	ExitCode  int    `json:"exitCode,omitempty"`
	// Steps are the durations of the last generation that reached Running.
	Steps *Steps `json:"steps,omitempty"`
	// Spec is the spec the job runs under: the stored one, or while that
	// is malformed the last good one. A client that rewrites a malformed
	// spec starts from it (UpdateSpec), and a new leader runs the job on
	// it.
	Spec *Spec `json:"spec,omitempty"`
	// Goodput is the job's account of its wall time by cause.
	Goodput   *Goodput  `json:"goodput,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Validate reports the first field of s that is out of range.
func (s Status) Validate() error {
	switch s.Phase {
	case JobWaiting, JobRestarting, JobRunning, JobSuspended, JobSucceeded, JobFailed:
	default:
		return fmt.Errorf("status: unknown phase %q", s.Phase)
	}
	if s.Generation < 0 || s.Members < 0 || s.Workers < 0 || s.Workers > s.Members || s.Ready < 0 || s.WorldSize < 0 || s.Restarts < 0 || s.Interruptions < 0 || s.HangRestarts < 0 {
		return fmt.Errorf("status: negative count")
	}
	if s.Spec != nil {
		if err := s.Spec.Validate(); err != nil {
			return fmt.Errorf("status: spec: %v", err)
		}
	}
	if s.Goodput != nil {
		if err := s.Goodput.Validate(); err != nil {
			return fmt.Errorf("status: %v", err)
		}
	}
	return nil
}

// DecodeStatus reads a status record. A malformed account does not make
// the status malformed: the account begins again at the status's
// UpdatedAt, and its Note says why.
func DecodeStatus(data []byte) (Status, error) {
	var s struct {
		Status
		Goodput json.RawMessage `json:"goodput,omitempty"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return Status{}, fmt.Errorf("%w: status: %v", ErrInvalidRecord, err)
	}
	if err := s.Status.Validate(); err != nil {
		return Status{}, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	st := s.Status
	if len(s.Goodput) > 0 && string(s.Goodput) != "null" {
		g, err := DecodeGoodput(s.Goodput)
		if err != nil {
			since := st.UpdatedAt
			if since.IsZero() {
				since = time.Unix(0, 0).UTC()
			}
			g = *NewGoodput(since, CauseRestarting)
			g.Note = fmt.Sprintf("the stored account was malformed (%v); counted again from %s", err, since.Format(time.RFC3339))
		}
		st.Goodput = &g
	}
	return st, nil
}

// Event is one entry of a job's timeline at Keys.Event.
type Event struct {
	Seq        int64     `json:"seq"`
	Time       time.Time `json:"time"`
	Generation int64     `json:"generation"`
	// Type is a CamelCase word: GenerationStopping, GenerationStarting,
	// GenerationRunning, NodeEvicted, RankHung, TimeAccounted,
	// JobSucceeded, JobFailed, RecordInvalid.
	Type    string `json:"type"`
	Message string `json:"message"`
	Steps   *Steps `json:"steps,omitempty"`
	// Members and WorldSize are the generation's, in the events of a
	// generation starting and running.
	Members   int `json:"members,omitempty"`
	WorldSize int `json:"worldSize,omitempty"`
	// Accounted are the spans the job's account counted to a new cause,
	// or moved to another, since the last event that carried some, in
	// order (Goodput.Changes): the timeline draws the account from them.
	Accounted []Span `json:"accounted,omitempty"`
}

// DecodeEvent reads an event record.
func DecodeEvent(data []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		return Event{}, fmt.Errorf("%w: event: %v", ErrInvalidRecord, err)
	}
	if e.Seq < 1 || e.Type == "" {
		return Event{}, fmt.Errorf("%w: event: want a positive seq and a type", ErrInvalidRecord)
	}
	return e, nil
}
