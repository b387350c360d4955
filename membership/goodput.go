package membership

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Cause is what a job's wall time went to. The causes are disjoint: their
// seconds add up to the job's wall time since its account began.
type Cause string

// Causes of a job's time.
const (
	// CauseTraining: a generation runs and its ranks step, net of re-done
	// work.
	CauseTraining Cause = "training"
	// CauseRestarting: from the job's last progress before a stop (the
	// stop's commit for ranks that report none) through the stop, the
	// wait and the start, to every rank's first step of the next
	// generation (every member running, for ranks that report none).
	CauseRestarting Cause = "restarting"
	// CauseWaiting: no generation can run: fewer nodes than the spec
	// needs.
	CauseWaiting Cause = "waiting"
	// CauseStarting: the job's own start-up. Before its first generation
	// trains: from the account's beginning (less the time waiting for a
	// node that had not started yet) to every rank's first step. Later,
	// the time waiting for a node that is starting up (a sidecar whose
	// warm interpreters import the job's preloads).
	CauseStarting Cause = "starting"
	// CauseHung: from the last progress to the stop, when a hung rank
	// caused the stop.
	CauseHung Cause = "hung"
	// CauseRedone: steps trained again after a resume below the furthest
	// step reached, at the job's step time.
	CauseRedone Cause = "redone"
	// CauseSuspended: the job stopped on purpose.
	CauseSuspended Cause = "suspended"
)

// Causes are every cause, in the order tables show them.
var Causes = []Cause{CauseTraining, CauseStarting, CauseRestarting, CauseWaiting, CauseHung, CauseRedone, CauseSuspended}

// LostCauses are the causes of time that is not training.
var LostCauses = Causes[1:]

// ParseCause checks that s names a cause.
func ParseCause(s string) (Cause, error) {
	for _, c := range Causes {
		if string(c) == s {
			return c, nil
		}
	}
	return "", fmt.Errorf("cause %q: want training, starting, restarting, waiting, hung, redone or suspended", s)
}

// Seconds are seconds by cause.
type Seconds struct {
	Training   float64 `json:"training"`
	Starting   float64 `json:"starting"`
	Restarting float64 `json:"restarting"`
	Waiting    float64 `json:"waiting"`
	Hung       float64 `json:"hung"`
	Redone     float64 `json:"redone"`
	Suspended  float64 `json:"suspended"`
}

// field is the seconds of cause c; nil for an unknown cause.
func (s *Seconds) field(c Cause) *float64 {
	switch c {
	case CauseTraining:
		return &s.Training
	case CauseStarting:
		return &s.Starting
	case CauseRestarting:
		return &s.Restarting
	case CauseWaiting:
		return &s.Waiting
	case CauseHung:
		return &s.Hung
	case CauseRedone:
		return &s.Redone
	case CauseSuspended:
		return &s.Suspended
	}
	return nil
}

// Of is the seconds of cause c.
func (s Seconds) Of(c Cause) float64 {
	if f := s.field(c); f != nil {
		return *f
	}
	return 0
}

// Add adds d seconds to cause c.
func (s *Seconds) Add(c Cause, d float64) {
	if f := s.field(c); f != nil {
		*f += d
	}
}

// Wall is the sum over the causes.
func (s Seconds) Wall() float64 {
	return s.Training + s.Starting + s.Restarting + s.Waiting + s.Hung + s.Redone + s.Suspended
}

// Lost is the wall time that was not training.
func (s Seconds) Lost() float64 { return s.Wall() - s.Training }

// Ratio is the goodput, training over wall; -1 with no wall time.
func (s Seconds) Ratio() float64 {
	w := s.Wall()
	if w <= 0 {
		return -1
	}
	return s.Training / w
}

// validate reports a negative or non-finite count.
func (s Seconds) validate() error {
	for _, c := range Causes {
		if v := s.Of(c); v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s seconds %v out of range", c, v)
		}
	}
	return nil
}

// Minute is the seconds of one minute of wall time, by cause.
type Minute struct {
	Start   time.Time `json:"start"`
	Seconds Seconds   `json:"seconds"`
}

// GoodputMinutes is how many minutes of history a ledger keeps: an hour
// and the minute under way.
const GoodputMinutes = 61

// Goodput is a job's account of its wall time by cause, kept by the
// coordinator leader in the job's status. The seconds are counted up to
// AsOf; since then the job has done Now, which a reader adds (At). The
// leader writes it when the cause changes and at most about once a
// second otherwise: never per step.
type Goodput struct {
	// Since is the first moment accounted; AsOf the last.
	Since time.Time `json:"since"`
	AsOf  time.Time `json:"asOf"`
	// Now is what the job has done since AsOf; empty once the job ended,
	// its account stopping at AsOf.
	Now Cause `json:"now,omitempty"`
	// Total are the seconds over the job's life, up to AsOf.
	Total Seconds `json:"total"`
	// Minutes are the seconds of the last GoodputMinutes minutes, by
	// minute of the wall clock, oldest first.
	Minutes []Minute `json:"minutes,omitempty"`
	// Note says why the account began again later than the job: the
	// stored one was malformed.
	Note string `json:"note,omitempty"`

	// What the leader keeps across a failover to class the time of a
	// generation that is over.

	// Generation is the generation the last training span belongs to;
	// TrainingFrom and TrainingTo bound that span (TrainingTo zero while
	// it lasts): what a generation's first step or its last progress,
	// learned later, moves out of training lies within it.
	Generation   int64     `json:"generation,omitempty"`
	TrainingFrom time.Time `json:"trainingFrom,omitzero"`
	TrainingTo   time.Time `json:"trainingTo,omitzero"`
	// FirstClassed: Generation's first step was accounted; LastClassed:
	// its last progress was.
	FirstClassed bool `json:"firstClassed,omitempty"`
	LastClassed  bool `json:"lastClassed,omitempty"`
	// HungStop: the span ended in a stop a hung rank caused; HungSince
	// is the hung rank's last sign of life, for ranks that report no
	// step.
	HungStop  bool      `json:"hungStop,omitempty"`
	HungSince time.Time `json:"hungSince,omitzero"`
	// Furthest is the furthest step the job's ranks named; StepTime the
	// wall time of one of those steps, last measured.
	Furthest int64    `json:"furthest,omitempty"`
	StepTime Duration `json:"stepTime,omitempty"`
	// Owed are the seconds of re-done steps not yet trained again: the
	// next training seconds go to redone until they are paid.
	Owed float64 `json:"owed,omitempty"`
	// NowSince is when the cause Now began.
	NowSince time.Time `json:"nowSince,omitzero"`
	// StartingUp says the job's ranks have not trained yet: the time
	// until they do counts as its start-up (CauseStarting), not as
	// restarts.
	StartingUp bool `json:"startingUp,omitempty"`

	// changes are the spans counted or moved since they were last taken
	// (Changes), for the job's timeline; not stored.
	changes []Span
}

// NewGoodput is an account that begins at since with cause now.
func NewGoodput(since time.Time, now Cause) *Goodput {
	return &Goodput{Since: since, AsOf: since, Now: now, NowSince: since}
}

// Validate reports the first field of g that is out of range.
func (g Goodput) Validate() error {
	if g.Since.IsZero() || g.AsOf.Before(g.Since) {
		return fmt.Errorf("goodput: asOf %s before since %s", g.AsOf.Format(time.RFC3339Nano), g.Since.Format(time.RFC3339Nano))
	}
	if g.Now != "" {
		if _, err := ParseCause(string(g.Now)); err != nil {
			return fmt.Errorf("goodput: %v", err)
		}
	}
	if err := g.Total.validate(); err != nil {
		return fmt.Errorf("goodput: %v", err)
	}
	if len(g.Minutes) > GoodputMinutes {
		return fmt.Errorf("goodput: %d minutes: want at most %d", len(g.Minutes), GoodputMinutes)
	}
	for i, m := range g.Minutes {
		if err := m.Seconds.validate(); err != nil {
			return fmt.Errorf("goodput: minute %d: %v", i, err)
		}
		if i > 0 && !m.Start.After(g.Minutes[i-1].Start) {
			return fmt.Errorf("goodput: minutes out of order")
		}
	}
	if g.Generation < 0 || g.Furthest < 0 || g.StepTime < 0 || g.Owed < 0 || math.IsNaN(g.Owed) || math.IsInf(g.Owed, 0) {
		return fmt.Errorf("goodput: negative generation, step, step time or owed seconds")
	}
	return nil
}

// DecodeGoodput reads an account, as a status carries it.
func DecodeGoodput(data []byte) (Goodput, error) {
	var g Goodput
	if err := json.Unmarshal(data, &g); err != nil {
		return Goodput{}, fmt.Errorf("%w: goodput: %v", ErrInvalidRecord, err)
	}
	if err := g.Validate(); err != nil {
		return Goodput{}, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	if len(g.Minutes) == 0 {
		g.Minutes = nil
	}
	return g, nil
}

// Clone is a deep copy of g.
func (g *Goodput) Clone() *Goodput {
	if g == nil {
		return nil
	}
	c := *g
	c.Minutes = append([]Minute(nil), g.Minutes...)
	c.changes = append([]Span(nil), g.changes...)
	return &c
}

// Account is a job's account as people read it: over its life and over
// the last hour.
type Account struct {
	Total    Seconds
	LastHour Seconds
	// Now is what the job does; empty once it ended.
	Now Cause
}

// At is the account at now: the stored seconds, and the time since AsOf
// added to the cause the job has been in since (to redone first while
// re-done seconds are owed). It writes nothing.
func (g *Goodput) At(now time.Time) Account {
	c := g.Clone()
	if c.Now != "" && now.After(c.AsOf) {
		c.Accrue(now)
	}
	acc := Account{Total: c.Total, Now: c.Now}
	from := now.Add(-time.Hour)
	if c.Now == "" {
		from = c.AsOf.Add(-time.Hour)
	}
	for _, m := range c.Minutes {
		if !m.Start.Before(from.Truncate(time.Minute)) {
			for _, cause := range Causes {
				acc.LastHour.Add(cause, m.Seconds.Of(cause))
			}
		}
	}
	return acc
}

// Accrue counts the time from AsOf to now to the cause Now: training
// seconds pay what is owed to redone first. A time before AsOf counts
// nothing.
func (g *Goodput) Accrue(now time.Time) {
	if !now.After(g.AsOf) {
		return
	}
	from := g.AsOf
	g.AsOf = now
	if g.Now == "" {
		return
	}
	if g.Now == CauseTraining && g.Owed > 0 {
		pay := min(g.Owed, now.Sub(from).Seconds())
		mid := from.Add(time.Duration(pay * float64(time.Second)))
		g.Owed -= pay
		if g.Owed < 1e-9 {
			g.Owed = 0
		}
		g.add(from, mid, CauseRedone, 1)
		from = mid
	}
	g.add(from, now, g.Now, 1)
}

// Move moves the seconds of [from, to), counted to cause was, to cause
// to; the interval is clipped to what is accounted (up to AsOf).
func (g *Goodput) Move(from, to time.Time, was, now Cause) {
	if to.After(g.AsOf) {
		to = g.AsOf
	}
	if from.Before(g.Since) {
		from = g.Since
	}
	if !to.After(from) || was == now {
		return
	}
	g.add(from, to, was, -1)
	g.add(from, to, now, 1)
	g.changes = append(g.changes, Span{Cause: now, From: from, To: to})
}

// add counts sign × the seconds of [from, to) to cause c, in the total
// and in the minutes they fall in; minutes older than GoodputMinutes are
// dropped.
func (g *Goodput) add(from, to time.Time, c Cause, sign float64) {
	if !to.After(from) {
		return
	}
	g.Total.Add(c, sign*to.Sub(from).Seconds())
	clampSeconds(&g.Total)
	for t := from; t.Before(to); {
		start := t.Truncate(time.Minute)
		end := start.Add(time.Minute)
		if end.After(to) {
			end = to
		}
		m := g.minute(start)
		if m != nil {
			m.Seconds.Add(c, sign*end.Sub(t).Seconds())
			clampSeconds(&m.Seconds)
		}
		t = end
	}
	if n := len(g.Minutes); n > GoodputMinutes {
		g.Minutes = append([]Minute(nil), g.Minutes[n-GoodputMinutes:]...)
	}
}

// minute is the bucket of the minute beginning at start, added in order;
// nil for a minute older than those kept.
func (g *Goodput) minute(start time.Time) *Minute {
	for i := len(g.Minutes) - 1; i >= 0; i-- {
		switch m := &g.Minutes[i]; {
		case m.Start.Equal(start):
			return m
		case m.Start.Before(start):
			g.Minutes = append(g.Minutes, Minute{})
			copy(g.Minutes[i+2:], g.Minutes[i+1:])
			g.Minutes[i+1] = Minute{Start: start}
			return &g.Minutes[i+1]
		}
	}
	if len(g.Minutes) >= GoodputMinutes {
		return nil
	}
	g.Minutes = append([]Minute{{Start: start}}, g.Minutes...)
	return &g.Minutes[0]
}

// clampSeconds rounds away the float error a move leaves below zero.
func clampSeconds(s *Seconds) {
	for _, c := range Causes {
		if f := s.field(c); *f < 0 {
			*f = 0
		}
	}
}
