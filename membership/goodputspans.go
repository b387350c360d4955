package membership

import (
	"fmt"
	"strings"
	"time"
)

// Span is a stretch of a job's wall time and the cause it was counted to,
// as the account changes it: the timeline draws the account from them.
type Span struct {
	Cause Cause     `json:"cause"`
	From  time.Time `json:"from"`
	// To is the end of the span; zero when the cause holds from From on,
	// until a later span says otherwise. A Cause of "" from From on is the
	// account's end.
	To time.Time `json:"to,omitzero"`
}

// Validate reports a span that ends before it begins or names no cause
// there is.
func (s Span) Validate() error {
	if s.Cause != "" {
		if _, err := ParseCause(string(s.Cause)); err != nil {
			return err
		}
	}
	if s.From.IsZero() || !s.To.IsZero() && s.To.Before(s.From) {
		return fmt.Errorf("span of %s: from %s to %s", s.Cause, s.From.Format(time.RFC3339Nano), s.To.Format(time.RFC3339Nano))
	}
	return nil
}

// Switch makes c the job's cause from at on (at is no earlier than AsOf:
// Accrue first). Training that begins while re-done seconds are owed pays
// them first, as Accrue counts it.
func (g *Goodput) Switch(c Cause, at time.Time) {
	if c == g.Now {
		return
	}
	g.Now, g.NowSince = c, at
	g.changes = append(g.changes, Span{Cause: c, From: at})
	if c == CauseTraining && g.Owed > 0 {
		g.changes = append(g.changes, Span{Cause: CauseRedone, From: at, To: at.Add(seconds(g.Owed))})
	}
}

// Owe adds s seconds of re-done steps to the seconds owed: the next
// training seconds (from AsOf on, if the job trains now) go to redone.
func (g *Goodput) Owe(s float64) {
	if s <= 0 {
		return
	}
	if g.Now == CauseTraining {
		from := g.AsOf.Add(seconds(g.Owed))
		g.changes = append(g.changes, Span{Cause: CauseRedone, From: from, To: from.Add(seconds(s))})
	}
	g.Owed += s
}

// Changes are the spans counted to a cause other than the one before, or
// moved from one cause to another, since Changes was last called, oldest
// first: laid over each other in order, they draw the account.
func (g *Goodput) Changes() []Span {
	out := g.changes
	g.changes = nil
	return out
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// SpansText says what spans counted, for an event: "hung for 4.98s from
// 12:00:01.204; restarting from 12:00:06.184 on".
func SpansText(spans []Span) string {
	var parts []string
	for _, s := range spans {
		at := s.From.UTC().Format("15:04:05.000")
		switch {
		case s.Cause == "":
			parts = append(parts, "the account ends at "+at)
		case s.To.IsZero():
			parts = append(parts, fmt.Sprintf("%s from %s on", s.Cause, at))
		default:
			parts = append(parts, fmt.Sprintf("%s for %s from %s", s.Cause, Duration(s.To.Sub(s.From)), at))
		}
	}
	return strings.Join(parts, "; ")
}
