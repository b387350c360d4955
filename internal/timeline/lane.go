package timeline

import (
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/elastictraining/coordinator/membership"
)

// Span is a stretch of a job's time doing one thing, as its events tell
// it: training from a generation running to the next stop, restarting
// (or waiting for nodes) from a stop to the next generation running, hung
// from a rank's hang being reported to the stop it caused. The job's
// account (membership.Goodput) has the exact seconds; the spans draw its
// shape.
type Span struct {
	Cause    membership.Cause
	From, To time.Time
}

// Activity reads the spans out of events, oldest first, up to end.
func Activity(events []membership.Event, end time.Time) []Span {
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

// causeColors are the lane's colours.
var causeColors = map[membership.Cause]color.Color{
	membership.CauseTraining:   color.RGBA{R: 44, G: 160, B: 44, A: 255},
	membership.CauseRestarting: color.RGBA{R: 255, G: 127, B: 14, A: 255},
	membership.CauseHung:       color.RGBA{R: 214, G: 39, B: 40, A: 255},
}

// lanePlot is the job's activity over time, a band of coloured spans.
func lanePlot(spans []Span, secs func(time.Time) float64, xmax float64) *plot.Plot {
	p := plot.New()
	p.Y.Label.Text = "what the job did"
	p.X.Min, p.X.Max = 0, xmax
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = plot.ConstantTicks(nil)
	p.Add(&lane{spans: spans, secs: secs})
	for _, c := range []membership.Cause{membership.CauseTraining, membership.CauseRestarting, membership.CauseHung} {
		p.Legend.Add(string(c), swatch{causeColors[c]})
	}
	p.Legend.Top, p.Legend.Left = true, false
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
		rect := vg.Rectangle{Min: vg.Point{X: trX(l.secs(s.From)), Y: trY(0.1)}, Max: vg.Point{X: trX(l.secs(s.To)), Y: trY(0.6)}}
		c.SetColor(causeColors[s.Cause])
		c.Fill(rect.Path())
	}
}
