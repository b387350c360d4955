package timeline

import (
	"image/color"
	"sort"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/elastictraining/coordinator/membership"
)

// Span is a stretch of a job's time counted to one cause.
type Span struct {
	Cause    membership.Cause
	From, To time.Time
}

// Activity is what the job did from the first event to end, oldest first:
// the spans its account counted, laid over each other in the order the
// events carry them (membership.Event.Accounted), so that the lane shows
// every second where the account has it. The account, if given, is the
// job's status's: a leader writes a change in an event with the next
// write of the account, so the account's cause now holds from when it
// began (NowSince) whatever the events say. Events of a coordinator that
// carried no spans are read as their types tell it (activityOfTypes).
func Activity(events []membership.Event, account *membership.Goodput, end time.Time) []Span {
	var changes []membership.Span
	seen := map[membership.Span]bool{}
	for _, e := range events {
		for _, s := range e.Accounted {
			// A span written twice (a commit whose answer was lost,
			// written again) is the same change: laid again, later, it
			// would cover what came after it.
			if s.Validate() == nil && !seen[s] {
				seen[s] = true
				changes = append(changes, s)
			}
		}
	}
	if len(changes) == 0 {
		return activityOfTypes(events, end)
	}
	var l paint
	var last membership.Cause // the cause of the latest open change
	for _, c := range changes {
		to := c.To
		if to.IsZero() {
			to, last = end, c.Cause
		}
		l.fill(c.Cause, c.From, to)
	}
	if g := account; g != nil && g.Now != "" && g.Now != last && !g.NowSince.IsZero() {
		l.fill(g.Now, g.NowSince, end)
	}
	return l.clip(end)
}

// paint is a lane of spans in time order, none overlapping; a fill over
// earlier ones replaces them where it lies.
type paint []Span

func (p *paint) fill(c membership.Cause, from, to time.Time) {
	if !to.After(from) {
		return
	}
	var out []Span
	for _, s := range *p {
		if s.To.After(from) && s.From.Before(to) {
			if s.From.Before(from) {
				out = append(out, Span{Cause: s.Cause, From: s.From, To: from})
			}
			if s.To.After(to) {
				out = append(out, Span{Cause: s.Cause, From: to, To: s.To})
			}
			continue
		}
		out = append(out, s)
	}
	if c != "" {
		out = append(out, Span{Cause: c, From: from, To: to})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].From.Before(out[j].From) })
	// Neighbours of one cause are one span.
	merged := out[:0]
	for _, s := range out {
		if n := len(merged); n > 0 && merged[n-1].Cause == s.Cause && !merged[n-1].To.Before(s.From) {
			if s.To.After(merged[n-1].To) {
				merged[n-1].To = s.To
			}
			continue
		}
		merged = append(merged, s)
	}
	*p = merged
}

// clip drops what lies after end.
func (p paint) clip(end time.Time) []Span {
	var out []Span
	for _, s := range p {
		if !s.From.Before(end) {
			continue
		}
		if s.To.After(end) {
			s.To = end
		}
		out = append(out, s)
	}
	return out
}

// activityOfTypes reads spans out of the events' types: training from a
// generation running to the next stop, restarting from a stop to the next
// generation running, hung from a rank's hang being reported (since its
// last sign of life, where the event says) to the stop it caused.
func activityOfTypes(events []membership.Event, end time.Time) []Span {
	var out []Span
	var cause membership.Cause
	var from time.Time
	switchTo := func(c membership.Cause, at time.Time) {
		if cause != "" && at.After(from) {
			out = append(out, Span{Cause: cause, From: from, To: at})
		}
		cause, from = c, at
	}
	for _, e := range events {
		switch e.Type {
		case "GenerationRunning":
			switchTo(membership.CauseTraining, e.Time)
		case "RankHung":
			if cause == membership.CauseTraining {
				switchTo(membership.CauseHung, e.Time)
			}
		case "GenerationStopping", "GenerationStarting":
			if cause != membership.CauseRestarting {
				switchTo(membership.CauseRestarting, e.Time)
			}
		case "JobSucceeded", "JobFailed":
			switchTo("", e.Time)
		}
	}
	switchTo("", end)
	return out
}

// CauseColors are the lane's colours, one a cause.
var CauseColors = map[membership.Cause]color.RGBA{
	membership.CauseTraining:   {R: 44, G: 160, B: 44, A: 255},
	membership.CauseStarting:   {R: 31, G: 119, B: 180, A: 255},
	membership.CauseRestarting: {R: 255, G: 127, B: 14, A: 255},
	membership.CauseWaiting:    {R: 127, G: 127, B: 127, A: 255},
	membership.CauseHung:       {R: 214, G: 39, B: 40, A: 255},
	membership.CauseRedone:     {R: 148, G: 103, B: 189, A: 255},
	membership.CauseSuspended:  {R: 23, G: 190, B: 207, A: 255},
}

// lanePlot is the job's activity over time, a band of coloured spans.
func lanePlot(spans []Span, secs func(time.Time) float64, xmax float64) *plot.Plot {
	p := plot.New()
	p.Y.Label.Text = "what the job did"
	p.X.Label.Text = "seconds"
	p.X.Min, p.X.Max = 0, xmax
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = plot.ConstantTicks(nil)
	p.Add(&lane{spans: spans, secs: secs})
	for _, c := range membership.Causes {
		p.Legend.Add(string(c), swatch{CauseColors[c]})
	}
	p.Legend.Top, p.Legend.Left = true, false
	p.Legend.Padding = vg.Points(1)
	return p
}

// lane draws spans as filled bands across the plot's height.
type lane struct {
	spans []Span
	secs  func(time.Time) float64
}

// Plot implements plot.Plotter.
func (l *lane) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	for _, s := range l.spans {
		rect := vg.Rectangle{Min: vg.Point{X: trX(l.secs(s.From)), Y: trY(0.05)}, Max: vg.Point{X: trX(l.secs(s.To)), Y: trY(0.35)}}
		c.SetColor(CauseColors[s.Cause])
		c.Fill(rect.Path())
	}
}
