package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// goodputReport is the goodput suite's report.
type goodputReport struct {
	cfg     goodputConfig
	date    time.Time
	took    time.Duration
	machine string
	load    string
	command string
	version string
	torch   string
	python  string
	runs    []goodputRun
	// left are the processes the jobs' stops left, described.
	left []string
}

var goodputFaultNames = map[string]string{
	faultKillRank:  "kill a rank",
	faultHang:      "hang a rank",
	faultKillNode:  "kill a node",
	faultFreeze:    "freeze a node",
	faultScaleUp:   "scale up by one",
	faultScaleDown: "scale down by one",
}

var configNames = map[string]string{
	"warm":     "coordinator",
	"spare":    "coordinator, 1 spare",
	"torchrun": "torchrun",
}

func configName(c string) string {
	if n, ok := configNames[c]; ok {
		return n
	}
	return "coordinator, " + c
}

func (r *goodputReport) write(w io.Writer) {
	g := r.cfg
	fmt.Fprintf(w, "bench-goodput: goodput of a PyTorch DDP job (bench/recovery/trainer.py: gloo on the CPU, a 334k-parameter MLP\n")
	fmt.Fprintf(w, "with Adam, steps padded to 20 ms) under a fault every %s, on coordinator run --np N --preload torch with\n", g.every)
	fmt.Fprintf(w, "elastic.save every step, with and without a spare, and under torchrun (a checkpoint on disk every %s steps).\n", torchrunEvery)
	var partial []string
	for _, run := range r.runs {
		if strings.HasPrefix(run.note, "not available") {
			partial = append(partial, fmt.Sprintf("np %d %s", run.np, configName(run.config)))
		} else if run.note == "" && run.config != "torchrun" && run.job == nil {
			partial = append(partial, fmt.Sprintf("np %d %s: the job's own account", run.np, configName(run.config)))
		}
	}
	if len(partial) > 0 {
		fmt.Fprintf(w, "PARTIAL: this build could not give %s.\n", strings.Join(partial, "; "))
	}
	fmt.Fprintf(w, "date: %s; took %s\n", r.date.Format("2006-01-02 15:04 MST"), r.took.Round(time.Second))
	fmt.Fprintf(w, "machine: %s; load average at the start %s\n", r.machine, r.load)
	fmt.Fprintf(w, "command: %s\n", r.command)
	fmt.Fprintf(w, "coordinator: %s\n", r.version)
	fmt.Fprintf(w, "torch and torchrun: %s (c10d, --nnodes N:N+1, --monitor_interval 0.1, last_call_timeout=1, -r 1 -t 1)\n", r.torch)
	fmt.Fprintf(w, "jobs: coordinator run --np N --job bench --preload torch [--spares 1] %s\n", strings.Join(goodputArgs, " "))
	fmt.Fprintf(w, "        -- %s bench/recovery/trainer.py --checkpoint memory --every 1 --path DIR/checkpoint.pt --state-mb 0\n", r.python)
	fmt.Fprintf(w, "      torchrun: the same script, --checkpoint disk --every %s (rank 0 saves with torch.save, tmp + rename)\n", torchrunEvery)

	fmt.Fprintf(w, "\neach job: %s fault-free (its step rate), then %s with a fault at the start of every %s window, in turn:\n", g.calibrate, g.duration, g.every)
	for _, f := range g.faults {
		fmt.Fprintf(w, "  %-17s %s\n", goodputFaultNames[f], faultHow(f, g.thaw))
	}
	fmt.Fprintf(w, "the victim of the k-th round of faults (k from 1) is rank k %% N; under torchrun a node's fault spares the agent\n")
	fmt.Fprintf(w, "that serves the c10d store (its loss ends the job) and takes the next rank's.\n")
	fmt.Fprintf(w, "\nfigures, from the trainers' own step logs (progress: the highest step any rank has done, so that a step\n")
	fmt.Fprintf(w, "trained twice counts once):\n")
	fmt.Fprintf(w, "  RATE       fault-free progress, steps a second, over the calibration (STEP: its median step interval)\n")
	fmt.Fprintf(w, "  STEPS      progress over the faults' stretch, WALL long\n")
	fmt.Fprintf(w, "  OUTSIDE    goodput measured from the outside: STEPS / (RATE × WALL)\n")
	fmt.Fprintf(w, "  JOB'S OWN  the job's own account of the same stretch (coordinator status -o json, goodput: the change in\n")
	fmt.Fprintf(w, "             trainingSeconds over the change in wallSeconds); n/a: this build's status has none\n")
	fmt.Fprintf(w, "  DIFF       JOB'S OWN − OUTSIDE, in points\n")

	for _, np := range r.sizes() {
		fmt.Fprintf(w, "\nnp %d\n", np)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CONFIGURATION\tFAULTS\tWALL\tRATE\tSTEP\tSTEPS\tOUTSIDE\tJOB'S OWN\tDIFF")
		for _, run := range r.runs {
			if run.np == np {
				fmt.Fprintf(tw, "%s\t%s\n", configName(run.config), run.figures())
			}
		}
		tw.Flush()
		r.writeDrift(w, np)
		r.writeKinds(w, np)
		r.writeCauses(w, np)
		r.writeFailedFaults(w, np)
	}
	if len(r.left) > 0 {
		fmt.Fprintf(w, "\nprocesses the jobs' stops left, killed: %s\n", strings.Join(r.left, "; "))
	}
}

func faultHow(kind string, thaw time.Duration) string {
	switch kind {
	case faultKillRank:
		return "SIGKILL of one trainer"
	case faultHang:
		return "SIGSTOP of one trainer, never continued: the system must end it"
	case faultKillNode:
		return "SIGKILL of a sidecar and everything under it, at once; run starts it again (torchrun: an agent and\n" +
			strings.Repeat(" ", 20) + "its worker; the harness starts another agent)"
	case faultFreeze:
		return fmt.Sprintf("SIGSTOP of a sidecar and everything under it (torchrun: an agent and its worker), SIGCONT %s later", thaw)
	case faultScaleUp:
		return "coordinator scale --np N+1 (torchrun: one more agent)"
	case faultScaleDown:
		return "coordinator scale --np N (torchrun: SIGTERM to the agent started last, not the store's)"
	}
	return kind
}

func (r *goodputReport) sizes() []int {
	var out []int
	for _, run := range r.runs {
		if len(out) == 0 || out[len(out)-1] != run.np {
			out = append(out, run.np)
		}
	}
	return out
}

// figures renders a run's columns from FAULTS on.
func (run goodputRun) figures() string {
	if run.note != "" && len(run.windows) == 0 {
		return "-\t-\t-\t-\t-\t-\t-\t-\t" + run.note
	}
	wall := 0.0
	steps := 0
	faults := 0
	for _, w := range run.windows {
		wall += w.end.Sub(w.start).Seconds()
		steps += w.steps
		if w.err == "" {
			faults++
		}
	}
	out := outside(run.windows, run.rate)
	own, diff := "-", "-"
	switch {
	case run.job != nil:
		own = percent(run.job.Ratio)
		diff = fmt.Sprintf("%+.1f", 100*(run.job.Ratio-out))
	case run.jobNote != "":
		own = run.jobNote
	}
	s := fmt.Sprintf("%d\t%.1fs\t%.1f/s\t%.1fms\t%d\t%s\t%s\t%s", faults, wall, run.rate,
		float64(run.stepTime)/float64(time.Millisecond), steps, percent(out), own, diff)
	if run.note != "" {
		s += "\t" + run.note
	}
	return s
}

func percent(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// seconds renders a median (min–max) and a sum of seconds.
func seconds(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	m, lo, hi := medianOf(xs)
	return fmt.Sprintf("%.1fs (%.1f–%.1f), Σ %.1fs", m, lo, hi, sum(xs))
}

// writeKinds gives, for each fault kind, the seconds its windows lost,
// from the outside and by the job's own account, a column a
// configuration.
func (r *goodputReport) writeKinds(w io.Writer, np int) {
	var runs []goodputRun
	for _, run := range r.runs {
		if run.np == np && len(run.windows) > 0 {
			runs = append(runs, run)
		}
	}
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(w, "seconds lost by fault kind: a fault's window, less its progress at RATE (outside), less its training\n")
	fmt.Fprintf(w, "seconds (the job's own); median (min–max) of the faults, and their sum\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := []string{"FAULT"}
	for _, run := range runs {
		header = append(header, strings.ToUpper(configName(run.config))+", OUTSIDE")
		if run.job != nil {
			header = append(header, "JOB'S OWN")
		}
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, f := range r.cfg.faults {
		line := []string{goodputFaultNames[f]}
		for _, run := range runs {
			var k kindLoss
			for _, x := range lossByKind(run.windows) {
				if x.kind == f {
					k = x
				}
			}
			line = append(line, seconds(k.outside))
			if run.job != nil {
				line = append(line, seconds(k.job))
			}
		}
		fmt.Fprintln(tw, strings.Join(line, "\t"))
	}
	tw.Flush()
}

// writeCauses gives the job's own seconds lost by cause over the faults'
// stretch.
func (r *goodputReport) writeCauses(w io.Writer, np int) {
	for _, run := range r.runs {
		if run.np != np || run.job == nil {
			continue
		}
		var parts []string
		for _, c := range causesOf(run.job) {
			parts = append(parts, fmt.Sprintf("%s %.1fs", c, run.job.Lost[c]))
		}
		fmt.Fprintf(w, "%s, seconds lost by cause (its own account, %.1fs of %.1fs): %s\n",
			configName(run.config), run.job.lostSeconds(), run.job.Wall, strings.Join(parts, ", "))
	}
}

// writeFailedFaults lists the faults that could not be made.
func (r *goodputReport) writeFailedFaults(w io.Writer, np int) {
	for _, run := range r.runs {
		if run.np != np {
			continue
		}
		for k, win := range run.windows {
			if win.err != "" {
				fmt.Fprintf(w, "%s: fault %d (%s) not made: %s\n", configName(run.config), k+1, goodputFaultNames[win.kind], win.err)
			}
		}
	}
}

// writeDrift compares each run's rate late in its windows, once recovered,
// with its calibration's: a lower one (a busy machine, a slower world)
// counts as lost from the outside, not in the job's own account.
func (r *goodputReport) writeDrift(w io.Writer, np int) {
	for _, run := range r.runs {
		late := lateRates(run.windows)
		if run.np != np || len(late) == 0 || run.rate <= 0 {
			continue
		}
		m, lo, hi := medianOf(late)
		fmt.Fprintf(w, "%s, rate in the last %s of each window: %.1f/s (%.1f–%.1f), %+.1f%% against RATE; OUTSIDE at that rate: %s\n",
			configName(run.config), lateStretch, m, lo, hi, 100*(m/run.rate-1), percent(outside(run.windows, m)))
	}
}
