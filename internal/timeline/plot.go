package timeline

import (
	"fmt"
	"image/color"
	"io"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/elastictraining/coordinator/membership"
)

// Formats are the file name extensions Plot draws.
var Formats = []string{".png", ".svg"}

// FormatOf is the format of a file name, or an error naming the ones
// there are.
func FormatOf(name string) (string, error) {
	ext := strings.ToLower(filepath.Ext(name))
	for _, f := range Formats {
		if ext == f {
			return f, nil
		}
	}
	return "", fmt.Errorf("%q: want a file name ending in %s", name, strings.Join(Formats, " or "))
}

// Job is what Plot draws: a job's events and, if it has one, its account
// (the status's), read at Now.
type Job struct {
	Title   string
	Events  []membership.Event
	Account *membership.Goodput
	Now     time.Time
}

// End is where the job's timeline ends: now for a job that runs (its
// account has a cause now), else its last event or the end of its
// account, whichever is later.
func (j Job) End() time.Time {
	var end time.Time
	for _, e := range j.Events {
		if e.Time.After(end) {
			end = e.Time
		}
	}
	if g := j.Account; g != nil {
		if g.AsOf.After(end) {
			end = g.AsOf
		}
		if g.Now != "" && j.Now.After(end) {
			end = j.Now
		}
	}
	return end
}

// Plot draws a job's history in format (".png" or ".svg") to w: the world
// size of each generation over time above, the duration of each restart
// (to every member running), step by step, below, and a lane of what the
// job did, by the causes of its account, at the bottom, up to its End.
func Plot(w io.Writer, format string, j Job) error {
	events := j.Events
	gens := Generations(events)
	if len(gens) == 0 {
		return fmt.Errorf("no generation in the events: nothing to plot")
	}
	origin := gens[0].Starting
	for _, e := range events {
		if e.Time.Before(origin) {
			origin = e.Time
		}
		for _, s := range e.Accounted {
			if s.Validate() == nil && s.From.Before(origin) {
				origin = s.From
			}
		}
	}
	end := j.End()
	secs := func(t time.Time) float64 { return t.Sub(origin).Seconds() }
	xmax := max(secs(end)*1.02, 1)
	title := j.Title

	size, err := sizePlot(title, origin, gens, secs, xmax)
	if err != nil {
		return err
	}
	restarts, err := restartPlot(gens, secs, xmax)
	if err != nil {
		return err
	}

	activity := lanePlot(Activity(events, j.Account, end), secs, xmax)

	width, height := 10*vg.Inch, 8*vg.Inch
	var canvas vg.CanvasWriterTo
	switch format {
	case ".png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(width, height)}
	case ".svg":
		canvas = vgsvg.New(width, height)
	default:
		return fmt.Errorf("format %q: want .png or .svg", format)
	}
	dc := draw.New(canvas)
	// A white background: a PNG is otherwise transparent.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{Rows: 3, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(12)}
	plots := [][]*plot.Plot{{size}, {restarts}, {activity}}
	canvases := plot.Align(plots, tiles, dc)
	size.Draw(canvases[0][0])
	restarts.Draw(canvases[1][0])
	activity.Draw(canvases[2][0])
	_, err = canvas.WriteTo(w)
	return err
}

// sizePlot is the world size and the members of each generation, a step
// per generation, labelled with its number.
func sizePlot(title string, origin time.Time, gens []Generation, secs func(time.Time) float64, xmax float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds since " + origin.UTC().Format("2006-01-02 15:04:05.000") + " UTC"
	p.Y.Label.Text = "processes / nodes"
	p.X.Min, p.X.Max = 0, xmax
	p.Y.Min = 0
	var world, members plotter.XYs
	labels := plotter.XYLabels{}
	for i, g := range gens {
		x0 := secs(g.Starting)
		x1 := xmax
		if i+1 < len(gens) {
			x1 = secs(gens[i+1].Starting)
		}
		world = append(world, plotter.XY{X: x0, Y: float64(g.World)}, plotter.XY{X: x1, Y: float64(g.World)})
		members = append(members, plotter.XY{X: x0, Y: float64(g.Members)}, plotter.XY{X: x1, Y: float64(g.Members)})
		labels.XYs = append(labels.XYs, plotter.XY{X: x0, Y: float64(g.World)})
		labels.Labels = append(labels.Labels, fmt.Sprintf("g%d", g.Number))
		p.Y.Max = max(p.Y.Max, float64(g.World)*1.25+1)
	}
	worldLine, err := plotter.NewLine(world)
	if err != nil {
		return nil, err
	}
	worldLine.Width = vg.Points(2)
	worldLine.Color = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	membersLine, err := plotter.NewLine(members)
	if err != nil {
		return nil, err
	}
	membersLine.Width = vg.Points(1.5)
	membersLine.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	membersLine.Color = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	marks, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range marks.TextStyle {
		marks.TextStyle[i].YAlign = draw.YBottom
		marks.TextStyle[i].XAlign = draw.XLeft
	}
	p.Add(worldLine, membersLine, marks, plotter.NewGrid())
	p.Legend.Add("world size (processes)", worldLine)
	p.Legend.Add("members (nodes)", membersLine)
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

// stepColors are the colours of the restart steps, in the order of
// membership.Steps.
var stepColors = []color.Color{
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
}

// restartPlot is each restart's duration at the time its generation ran,
// as a stack of its steps: detect, stop, wait, start.
func restartPlot(gens []Generation, secs func(time.Time) float64, xmax float64) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "restart to all running (ms)"
	p.X.Min, p.X.Max = 0, xmax
	p.Y.Min = 0
	bars := &stackedBars{width: vg.Points(max(3, min(16, 500/float64(len(gens)+1))))}
	for _, g := range gens {
		if g.Steps == nil || g.Running.IsZero() {
			continue
		}
		ms := func(d membership.Duration) float64 { return float64(time.Duration(d)) / float64(time.Millisecond) }
		bars.x = append(bars.x, secs(g.Running))
		bars.steps = append(bars.steps, []float64{ms(g.Steps.Detect), ms(g.Steps.Stop), ms(g.Steps.Wait), ms(g.Steps.Start)})
		p.Y.Max = max(p.Y.Max, ms(g.Steps.Total)*1.15)
	}
	p.Y.Max = max(p.Y.Max, 1)
	p.Add(plotter.NewGrid(), bars)
	for i, name := range []string{"detect", "stop", "wait", "start"} {
		p.Legend.Add(name, swatch{stepColors[i]})
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

// stackedBars draws, at each x, a bar of its steps stacked bottom up.
type stackedBars struct {
	x     []float64
	steps [][]float64
	width vg.Length
}

// Plot implements plot.Plotter.
func (b *stackedBars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	for i, x := range b.x {
		cx := trX(x)
		bottom := 0.0
		for s, v := range b.steps[i] {
			if v <= 0 {
				continue
			}
			top := bottom + v
			rect := vg.Rectangle{Min: vg.Point{X: cx - b.width/2, Y: trY(bottom)}, Max: vg.Point{X: cx + b.width/2, Y: trY(top)}}
			c.SetColor(stepColors[s%len(stepColors)])
			c.Fill(rect.Path())
			bottom = top
		}
	}
}

// DataRange implements plot.DataRanger.
func (b *stackedBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	for i, x := range b.x {
		total := 0.0
		for _, v := range b.steps[i] {
			total += v
		}
		if i == 0 || x < xmin {
			xmin = x
		}
		xmax, ymax = max(xmax, x), max(ymax, total)
	}
	return xmin, xmax, 0, ymax
}

// swatch is a legend entry of a filled colour.
type swatch struct{ color color.Color }

// Thumbnail implements plot.Thumbnailer.
func (s swatch) Thumbnail(c *draw.Canvas) {
	c.SetColor(s.color)
	c.Fill(c.Rectangle.Path())
}
