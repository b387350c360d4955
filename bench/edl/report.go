package main

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// seed are the published averages over 10 passes (edl-experiment.md).
var seed = map[int]map[string]struct{ pending, util, offPeak float64 }{
	1: {modeOff: {280.5, 76.16, 0}, modeEDL: {42.9, 76.33, 0}, modeOn: {42.9, 76.33, 0}},
	2: {modeOff: {1.5, 61.86, 44.91}, modeEDL: {53.6, 83.42, 79.35}, modeOn: {53.6, 83.42, 79.35}},
}

var modeNames = map[string]string{modeOff: "autoscaling off", modeEDL: "EDL's rule", modeOn: "--autoscale"}

// measures are one pass's figures.
type measures struct {
	pending, strict time.Duration // averages over the jobs
	util, offPeak   float64       // percent
	nginxRamp       time.Duration // scale-up steps of nginx: to every pod Running
	restarts        float64       // per job
	perJobHour      float64       // restarts per job-hour, in the seed's time
}

func measure(p *pass) measures {
	var m measures
	end := p.samples[len(p.samples)-1].at
	var jobHours float64
	for _, j := range p.jobs {
		seen := j.seen
		if seen == 0 {
			seen = j.submitted
		}
		m.pending += or(j.running, end) - seen
		m.strict += or(j.trained, end) - seen
		m.restarts += float64(max(j.generation-1, 0))
		jobHours += (end - j.submitted).Hours() * float64(p.env.compress)
	}
	if jobHours > 0 {
		m.perJobHour = m.restarts / jobHours
	}
	if n := len(p.jobs); n > 0 {
		m.pending /= time.Duration(n)
		m.strict /= time.Duration(n)
		m.restarts /= float64(n)
	}
	var sum, off float64
	var offN int
	lo, hi := 300*time.Second/time.Duration(p.env.compress), 370*time.Second/time.Duration(p.env.compress)
	for _, s := range p.samples {
		sum += s.utilization
		if s.at >= lo && s.at <= hi {
			off += s.utilization
			offN++
		}
	}
	m.util = 100 * sum / float64(len(p.samples))
	if offN > 0 {
		m.offPeak = 100 * off / float64(offN)
	}
	// nginx's scale-ups after the jobs came: from the step to every pod
	// Running.
	var ramps []time.Duration
	last := 0
	for i, mk := range p.marks {
		if mk.what != "nginx" {
			continue
		}
		if i > 0 && mk.value > last {
			for _, s := range p.samples {
				if s.at >= mk.at && s.nginx >= mk.value {
					ramps = append(ramps, s.at-mk.at)
					break
				}
			}
		}
		last = mk.value
	}
	for _, r := range ramps {
		m.nginxRamp += r
	}
	if len(ramps) > 0 {
		m.nginxRamp /= time.Duration(len(ramps))
	}
	return m
}

func or(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// mean averages a measure over the passes.
func mean(ps []*pass) measures {
	var m measures
	for _, p := range ps {
		x := measure(p)
		m.pending += x.pending / time.Duration(len(ps))
		m.strict += x.strict / time.Duration(len(ps))
		m.nginxRamp += x.nginxRamp / time.Duration(len(ps))
		m.util += x.util / float64(len(ps))
		m.offPeak += x.offPeak / float64(len(ps))
		m.restarts += x.restarts / float64(len(ps))
		m.perJobHour += x.perJobHour / float64(len(ps))
	}
	return m
}

func report(results map[int]map[string][]*pass, compress int, scheduler, out string) error {
	f, err := os.Create(filepath.Join(out, "edl.md"))
	if err != nil {
		return err
	}
	defer f.Close()
	w := io.MultiWriter(os.Stdout, f)
	fmt.Fprintf(w, "# The seed's EDL experiment, reproduced (make bench-edl)\n\n")
	fmt.Fprintf(w, "kube-apiserver, kube-scheduler and controller-manager with kwok: 133 nodes, 2,348 allocatable CPU; the real `coordinator serve --kubernetes`; a simulated node (the real sidecar agent, an in-memory trainer) for every Running pod. Trainers 5 CPU / 8 Gi, 2 parameter servers of 4 CPU / 5 Gi a job, nginx 3 CPU / 3 Gi of a higher PriorityClass. The seed's schedule runs **%d× faster** (times below are as measured, in the compressed run; the autoscaler's cooldown and period are compressed alike; restarts per job-hour are per hour of the seed's schedule). Every pod is placed by the kube-scheduler's %q profile, in every mode alike. Averages over the passes; the seed's over 10.\n\n", compress, scheduler)
	for _, c := range []int{1, 2} {
		byMode, ok := results[c]
		if !ok {
			continue
		}
		passes := 0
		for _, ps := range byMode {
			passes = max(passes, len(ps))
		}
		fmt.Fprintf(w, "## Case %d (%d passes a mode)\n\n", c, passes)
		if c == 1 {
			fmt.Fprintln(w, "| | seed: pending | pending (first pod Running) | pending (first generation with ≥ min trainers) | seed: utilization | utilization | restarts / job | restarts / job-hour |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
		} else {
			fmt.Fprintln(w, "| | seed: pending | pending (first pod Running) | pending (first generation with ≥ min trainers) | seed: utilization | utilization | seed: off-peak | off-peak | nginx scale-up to all Running | restarts / job | restarts / job-hour |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
		}
		for _, mode := range []string{modeOff, modeEDL, modeOn} {
			ps := byMode[mode]
			if len(ps) == 0 {
				continue
			}
			m, s := mean(ps), seed[c][mode]
			if c == 1 {
				fmt.Fprintf(w, "| %s | %.1f s | %.1f s | %.1f s | %.2f %% | %.2f %% | %.1f | %.0f |\n", modeNames[mode], s.pending,
					m.pending.Seconds(), m.strict.Seconds(), s.util, m.util, m.restarts, m.perJobHour)
			} else {
				fmt.Fprintf(w, "| %s | %.1f s | %.1f s | %.1f s | %.2f %% | %.2f %% | %.2f %% | %.2f %% | %.1f s | %.1f | %.0f |\n", modeNames[mode], s.pending,
					m.pending.Seconds(), m.strict.Seconds(), s.util, m.util, s.offPeak, m.offPeak, m.nginxRamp.Seconds(), m.restarts, m.perJobHour)
			}
		}
		fmt.Fprintln(w)
		if c == 2 {
			phases(w, byMode)
		}
		if err := plots(c, byMode, out); err != nil {
			return err
		}
		fmt.Fprintf(w, "Plots (first pass of each mode): %s.\n\n", plotNames(c))
	}
	return nil
}

func plotNames(c int) string {
	if c == 1 {
		return "`edl-case1-pending.png`, `edl-case1-utilization.png`"
	}
	return "`edl-case2-pods.png`, `edl-case2-utilization.png`"
}

var modeColors = map[string]color.RGBA{modeOff: {R: 160, G: 160, B: 160, A: 255}, modeEDL: {R: 220, G: 120, B: 0, A: 255}, modeOn: {R: 0, G: 90, B: 200, A: 255}}

// plots draws the first pass of each mode, like the seed's figures.
func plots(c int, byMode map[string][]*pass, out string) error {
	type series struct {
		name  string
		value func(sample) float64
		dash  bool
	}
	draw := func(file, title, ylabel string, ss []series) error {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "seconds (compressed schedule)"
		p.Y.Label.Text = ylabel
		p.Legend.Top = true
		for _, mode := range []string{modeOff, modeEDL, modeOn} {
			ps := byMode[mode]
			if len(ps) == 0 {
				continue
			}
			for _, s := range ss {
				pts := make(plotter.XYs, len(ps[0].samples))
				for i, smp := range ps[0].samples {
					pts[i].X, pts[i].Y = smp.at.Seconds(), s.value(smp)
				}
				line, err := plotter.NewLine(pts)
				if err != nil {
					return err
				}
				line.Color = modeColors[mode]
				line.Width = vg.Points(1.2)
				if s.dash {
					line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				}
				p.Add(line)
				p.Legend.Add(modeNames[mode]+s.name, line)
			}
		}
		return p.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(out, file))
	}
	util := series{"", func(s sample) float64 { return 100 * s.utilization }, false}
	if c == 1 {
		if err := draw("edl-case1-pending.png", "Case 1: pending jobs", "jobs", []series{{"", func(s sample) float64 { return float64(s.pendingJobs) }, false}}); err != nil {
			return err
		}
		return draw("edl-case1-utilization.png", "Case 1: CPU utilization (requests of Running pods / allocatable)", "%", []series{util})
	}
	if err := draw("edl-case2-pods.png", "Case 2: nginx pods (solid) and trainer pods (dashed) Running", "pods",
		[]series{{": nginx", func(s sample) float64 { return float64(s.nginx) }, false}, {": trainers", func(s sample) float64 { return float64(s.trainers) }, true}}); err != nil {
		return err
	}
	return draw("edl-case2-utilization.png", "Case 2: CPU utilization (requests of Running pods / allocatable)", "%", []series{util})
}

// phases prints case 2's utilization at each step of nginx, and the CPU
// stranded on nodes where no trainer fits: what fragmentation leaves.
func phases(w io.Writer, byMode map[string][]*pass) {
	fmt.Fprintln(w, "Utilization / stranded CPU (free on nodes with room for no trainer) by step of nginx, averages over the passes:")
	fmt.Fprintln(w)
	var header []string
	for _, mode := range []string{modeOff, modeEDL, modeOn} {
		ps := byMode[mode]
		if len(ps) == 0 {
			continue
		}
		steps := nginxSteps(ps[0])
		if header == nil {
			header = steps
			fmt.Fprintf(w, "| | %s |\n|---|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
		}
		util, stranded := make([]float64, len(steps)), make([]float64, len(steps))
		for _, p := range ps {
			u, st := stepAverages(p)
			for i := range min(len(u), len(util)) {
				util[i] += u[i] / float64(len(ps))
				stranded[i] += st[i] / float64(len(ps))
			}
		}
		cells := make([]string, len(steps))
		for i := range steps {
			cells[i] = fmt.Sprintf("%.1f %% / %.1f %%", 100*util[i], 100*stranded[i])
		}
		fmt.Fprintf(w, "| %s | %s |\n", modeNames[mode], strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
}

// nginxSteps names the pass's windows: from each change of nginx to the
// next, the first from the last job's arrival.
func nginxSteps(p *pass) []string {
	var out []string
	for _, mk := range p.marks {
		if mk.what == "nginx" {
			out = append(out, fmt.Sprintf("nginx %d", mk.value))
		}
	}
	if len(out) > 0 {
		out[0] += " (from the start: nginx alone, then the jobs)"
	}
	return out
}

// stepAverages averages utilization and stranded CPU over each window
// between changes of nginx.
func stepAverages(p *pass) (util, stranded []float64) {
	var bounds []time.Duration
	for _, mk := range p.marks {
		if mk.what == "nginx" {
			bounds = append(bounds, mk.at)
		}
	}
	bounds = append(bounds, time.Duration(1<<62))
	util, stranded = make([]float64, len(bounds)-1), make([]float64, len(bounds)-1)
	counts := make([]int, len(bounds)-1)
	for _, s := range p.samples {
		for i := range len(bounds) - 1 {
			if s.at >= bounds[i] && s.at < bounds[i+1] {
				util[i] += s.utilization
				stranded[i] += s.stranded
				counts[i]++
			}
		}
	}
	for i, n := range counts {
		if n > 0 {
			util[i] /= float64(n)
			stranded[i] /= float64(n)
		}
	}
	return util, stranded
}
