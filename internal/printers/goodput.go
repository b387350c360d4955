package printers

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// Goodput is a job's account of its wall time as `status -o json` shows
// it: over its life, and over the last hour (LastHour). Scripts read these
// names; keep them.
type Goodput struct {
	Figures
	LastHour Figures `json:"lastHour"`
	// Now is what the job does: training, starting, restarting...; empty
	// once it ended.
	Now membership.Cause `json:"now,omitempty"`
	// Note says why the account began later than the job, if it did.
	Note string `json:"note,omitempty"`
}

// Figures are goodput and the seconds by cause over one span.
type Figures struct {
	// Ratio is training seconds over wall seconds; 0 with no wall time.
	Ratio           float64     `json:"ratio"`
	WallSeconds     float64     `json:"wallSeconds"`
	TrainingSeconds float64     `json:"trainingSeconds"`
	LostSeconds     LostSeconds `json:"lostSeconds"`
}

// LostSeconds are the seconds that were not training, by cause.
type LostSeconds struct {
	Starting   float64 `json:"starting"`
	Restarting float64 `json:"restarting"`
	Waiting    float64 `json:"waiting"`
	Hung       float64 `json:"hung"`
	Redone     float64 `json:"redone"`
	Suspended  float64 `json:"suspended"`
}

// NewGoodput is the account g at now; nil without one.
func NewGoodput(g *membership.Goodput, now time.Time) *Goodput {
	if g == nil {
		return nil
	}
	acc := g.At(now)
	return &Goodput{Figures: figures(acc.Total), LastHour: figures(acc.LastHour), Now: acc.Now, Note: g.Note}
}

func figures(s membership.Seconds) Figures {
	f := Figures{WallSeconds: round3(s.Wall()), TrainingSeconds: round3(s.Training),
		LostSeconds: LostSeconds{Starting: round3(s.Starting), Restarting: round3(s.Restarting), Waiting: round3(s.Waiting), Hung: round3(s.Hung),
			Redone: round3(s.Redone), Suspended: round3(s.Suspended)}}
	if r := s.Ratio(); r >= 0 {
		f.Ratio = math.Round(r*1e4) / 1e4
	}
	return f
}

func round3(v float64) float64 { return math.Round(v*1e3) / 1e3 }

// Percent is the ratio as tables show it: "97.3%", or "-" without wall
// time.
func (f Figures) Percent() string {
	if f.WallSeconds <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", f.Ratio*100)
}

// Lost says the seconds lost by cause, the largest first: "restarting
// 9.1s, hung 5.2s", or "nothing lost".
func (f Figures) Lost() string {
	l := f.LostSeconds
	var parts []string
	for _, c := range []struct {
		name string
		s    float64
	}{{"starting", l.Starting}, {"restarting", l.Restarting}, {"waiting", l.Waiting}, {"hung", l.Hung}, {"redone", l.Redone}, {"suspended", l.Suspended}} {
		if c.s >= 0.0005 {
			parts = append(parts, fmt.Sprintf("%s %s", c.name, secondsText(c.s)))
		}
	}
	if len(parts) == 0 {
		return "nothing lost"
	}
	return "lost " + strings.Join(parts, ", ")
}

// Line is the account as `status` prints it: "97.3% of 10m0s (lost
// restarting 9.1s, hung 5.2s); last hour 97.3% of 10m0s (...)".
func (g Goodput) Line() string {
	s := fmt.Sprintf("%s of %s (%s)", g.Percent(), secondsText(g.WallSeconds), g.Figures.Lost())
	if g.LastHour.WallSeconds < g.WallSeconds-0.5 {
		s += fmt.Sprintf("; last hour %s (%s)", g.LastHour.Percent(), g.LastHour.Lost())
	}
	if g.Now != "" {
		s += "; now " + string(g.Now)
	}
	if g.Note != "" {
		s += "; " + g.Note
	}
	return s
}

// secondsText renders a count of seconds as a duration: "9.1s", "10m0s".
func secondsText(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
