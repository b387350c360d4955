package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/elastictraining/coordinator/bench/internal/stats"
	"github.com/elastictraining/coordinator/english"
)

// hangResult is the hang suite at one job size.
type hangResult struct {
	np     int
	rows   []hangRow
	pauses []pauseRun
}

// hangReport is the hang suite's report.
type hangReport struct {
	date    time.Time
	took    time.Duration
	machine string
	load    string
	command string
	torch   string
	version string
	// runCommand is the jobs' run command line, as a person would type it.
	runCommand string
	cfg        hangConfig
	settle     int
	missing    map[string]string
	results    []hangResult
	// left are the processes of the harness's jobs still running at the
	// end: none, or the harness failed at its own cleanup.
	left []string
}

// defaultLeastTimeout is the least hang timeout run learns by default.
const defaultLeastTimeout = 5 * time.Second

var faultNames = map[string]string{
	faultStopped:    "trainer stopped",
	faultDeadlocked: "trainer deadlocked",
}

func (r *hangReport) write(w io.Writer) {
	fmt.Fprintf(w, "bench-hang: hang detection (issue 32) on a PyTorch DDP job (bench/recovery/trainer.py: gloo on the CPU, a\n")
	fmt.Fprintf(w, "334k-parameter MLP with Adam, steps padded to 20 ms; a plain script that imports nothing of ours) on\n")
	fmt.Fprintf(w, "coordinator run --np N --preload torch (a process a node), and under torchrun in the same run.\n")
	shown := r.defaultTimeouts()
	switch {
	case len(shown) == 0 && !r.recovered():
		fmt.Fprintf(w, "PARTIAL: coordinator status showed no hang timeout in any job and no hang on run was recovered: this\n")
		fmt.Fprintf(w, "build watches no rank's progress, and the figures of coordinator run below measure no hang detection.\n")
	case len(shown) == 0:
		fmt.Fprintf(w, "note: coordinator status showed no hang timeout in any job.\n")
	}
	fmt.Fprintf(w, "date: %s; took %s\n", r.date.Format("2006-01-02 15:04 MST"), r.took.Round(time.Second))
	fmt.Fprintf(w, "machine: %s; load average at the start %s\n", r.machine, r.load)
	fmt.Fprintf(w, "command: %s\n", r.command)
	fmt.Fprintf(w, "coordinator: %s\n", r.version)
	fmt.Fprintf(w, "torch and torchrun: %s (c10d, --monitor_interval 0.1, last_call_timeout=1, -r 1 -t 1)\n", r.torch)
	fmt.Fprintf(w, "jobs: %s\n", r.runCommand)
	if len(shown) > 0 {
		fmt.Fprintf(w, "default hang timeout, as coordinator status showed it in the jobs of default settings: %s\n", strings.Join(shown, ", "))
	}
	fmt.Fprintf(w, "\nfaults, on rank %d, its node's sidecar and guard alive; each in a job of its own (a job's hang timeout grows\n", hungRank)
	fmt.Fprintf(w, "after a hang restart, and a node that hangs twice is excluded), after %d steps of every rank and a random wait up to 1s:\n", r.settle)
	fmt.Fprintf(w, "  trainer stopped     SIGSTOP of rank %d's trainer process alone\n", hungRank)
	fmt.Fprintf(w, "  trainer deadlocked  rank %d's trainer sleeps in %s() before its next step, alive\n", hungRank, hangFunction)
	fmt.Fprintf(w, "                      (it looks for a file the harness creates; the fault's time is the file's creation)\n")
	fmt.Fprintf(w, "modes: preload = --preload torch, rank 0 saves to disk every 50 steps (torch.save): progress only from torch's\n")
	fmt.Fprintf(w, "       optimizer steps; warm = --preload torch, elastic.save every step; torchrun = the preload mode's script.\n")
	for _, name := range []string{"preload", "warm", "hang-timeout"} {
		if why, ok := r.missing[name]; ok {
			fmt.Fprintf(w, "       %s: not available on this build (%s)\n", name, why)
		}
	}
	fmt.Fprintf(w, "limits: every rank training again within %s of the fault on coordinator run, %s under torchrun; a row gives\n", r.cfg.limit, r.cfg.torchrunLimit)
	fmt.Fprintf(w, "up after %s not recovered within its limit.\n", english.Count(r.cfg.giveUp, "fault"))
	fmt.Fprintf(w, "\nfigures: median of the faults recovered within the limit (min–max), from the trainers' own step logs.\n")
	fmt.Fprintf(w, "  RECOVERED       faults after which every rank trained again within the limit, of those made\n")
	fmt.Fprintf(w, "  TRAINING AGAIN  fault → the last rank of the new generation takes its first step\n")
	fmt.Fprintf(w, "  STEPS LOST      highest step done before, + 1, − the step the new generation resumed from\n")
	fmt.Fprintf(w, "  HANG TIMEOUT    in force before the fault, as coordinator status -o json showed it (slowest.hangTimeoutSeconds)\n")
	fmt.Fprintf(w, "  STACKS          faults after which every rank's log (run --log-dir) holds a stack of the hung generation\n")
	fmt.Fprintf(w, "                  (%q), rank %d's naming the function it was in (deadlocked: %s)\n", stackMark, hungRank, hangFunction)

	for _, res := range r.results {
		fmt.Fprintf(w, "\nnp %d\n", res.np)
		if len(res.rows) > 0 {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FAULT\tMODE\tSETTINGS\tRUNS\tRECOVERED\tTRAINING AGAIN\tSTEPS LOST\tHANG TIMEOUT\tSTACKS")
			for _, row := range res.rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", faultNames[row.fault], row.mode, row.settings, row.cells())
			}
			tw.Flush()
			writeHangRatios(w, res.rows)
		}
		if len(res.pauses) > 0 {
			fmt.Fprintf(w, "\npause runs: fault-free, mode preload, default settings; every rank sleeps in periodic_evaluation(), declaring\n")
			fmt.Fprintf(w, "nothing, after every N-th step and its checkpoint. PAUSES: rank 0's, not cut by a restart. HANG RESTARTS,\n")
			fmt.Fprintf(w, "RESTARTS and HANG TIMEOUT from coordinator status -o json at the end; GENERATIONS from the step logs.\n")
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PAUSE\tRAN\tSTEPS\tPAUSES\tHANG RESTARTS\tRESTARTS\tGENERATIONS\tHANG TIMEOUT AT THE END")
			for _, p := range res.pauses {
				fmt.Fprintf(tw, "%s every %d steps\t%s\n", p.pause, p.every, p.cells())
			}
			tw.Flush()
		}
		r.writeBounds(w, res)
	}
	if len(r.left) == 0 {
		fmt.Fprintf(w, "\nprocesses of the jobs left running at the end: none\n")
	} else {
		fmt.Fprintf(w, "\nprocesses of the jobs left running at the end (killed): %s\n", strings.Join(r.left, "; "))
	}
}

// defaultTimeouts are the distinct hang timeouts status showed in the jobs
// of default settings: before the faults, and at the end of the pause
// runs.
func (r *hangReport) defaultTimeouts() []string {
	var out []string
	note := func(t time.Duration) {
		if t > 0 && !slices.Contains(out, t.String()) {
			out = append(out, t.String())
		}
	}
	for _, res := range r.results {
		for _, row := range res.rows {
			if row.settings == "default" && row.mode != "torchrun" {
				for _, t := range row.timeouts {
					note(t)
				}
			}
		}
		for _, p := range res.pauses {
			note(p.timeout)
		}
	}
	return out
}

// recovered says whether a fault on coordinator run was recovered.
func (r *hangReport) recovered() bool {
	for _, res := range r.results {
		for _, row := range res.rows {
			if row.mode != "torchrun" && len(row.outcomes) > 0 {
				return true
			}
		}
	}
	return false
}

// cells renders a row's columns from RUNS on.
func (row hangRow) cells() string {
	if row.tried == 0 {
		return "0\t-\t-\t-\t-\t-\t" + row.note
	}
	var again []time.Duration
	var lost []int
	for _, o := range row.outcomes {
		again, lost = append(again, o.Recovery), append(lost, o.Lost)
	}
	againCell, lostCell := "none within "+row.limit.String(), "-"
	if len(again) > 0 {
		againCell, lostCell = spread(again), spreadInts(lost)
	}
	s := fmt.Sprintf("%d\t%d of %d\t%s\t%s\t%s\t%s", row.tried, len(row.outcomes), row.tried, againCell, lostCell, timeoutsCell(row.timeouts, row.mode), stacksCell(row.stacks))
	if row.note != "" {
		s += "\t" + row.note
	}
	return s
}

func timeoutsCell(timeouts []time.Duration, mode string) string {
	if mode == "torchrun" {
		return "-"
	}
	var shown []string
	for _, t := range timeouts {
		v := "not shown"
		if t > 0 {
			v = t.String()
		}
		if !slices.Contains(shown, v) {
			shown = append(shown, v)
		}
	}
	if len(shown) == 0 {
		return "-"
	}
	return strings.Join(shown, ", ")
}

func stacksCell(checks []stackCheck) string {
	if len(checks) == 0 {
		return "-"
	}
	ok, why := 0, ""
	var in []string
	for _, c := range checks {
		if c.ok {
			ok++
		} else if why == "" {
			why = c.why
		}
		if c.in != "" && !slices.Contains(in, c.in) {
			in = append(in, c.in)
		}
	}
	s := fmt.Sprintf("%d of %d", ok, len(checks))
	if len(in) > 0 {
		s += fmt.Sprintf(" (rank %d in %s)", hungRank, strings.Join(in, ", "))
	}
	if why != "" {
		s += ": " + why
	}
	return s
}

func (p pauseRun) cells() string {
	if p.note != "" && p.generations == 0 {
		return "-\t-\t-\t-\t-\t-\t-\t" + p.note
	}
	timeout := "not shown"
	if p.timeout > 0 {
		timeout = p.timeout.String()
	}
	return fmt.Sprintf("%s\t%d\t%d\t%d\t%d\t%d\t%s", p.ran.Round(time.Second), p.steps, p.pauses, p.hangRestarts, p.restarts, p.generations, timeout)
}

// writeHangRatios compares torchrun's time to training again with run's
// default preload mode's, for each fault: when torchrun did not recover,
// its limit bounds the ratio from below.
func writeHangRatios(w io.Writer, rows []hangRow) {
	for _, theirs := range rows {
		if theirs.mode != "torchrun" || theirs.tried == 0 {
			continue
		}
		for _, ours := range rows {
			if ours.fault != theirs.fault || ours.mode != "preload" || ours.settings != "default" || len(ours.outcomes) == 0 {
				continue
			}
			m := medianRecovery(ours.outcomes)
			if len(theirs.outcomes) == 0 {
				fmt.Fprintf(w, "%s, training again: torchrun none within %s, more than %.0f× as long as preload (%s)\n",
					faultNames[theirs.fault], theirs.limit, float64(theirs.limit)/float64(m), stats.Ms(m))
			} else {
				fmt.Fprintf(w, "%s, training again: torchrun takes %.1f× as long as preload\n",
					faultNames[theirs.fault], float64(medianRecovery(theirs.outcomes))/float64(m))
			}
		}
	}
}

func medianRecovery(outcomes []outcome) time.Duration {
	d := make([]time.Duration, len(outcomes))
	for i, o := range outcomes {
		d[i] = o.Recovery
	}
	return stats.Median(d)
}

// writeBounds holds the figures to the bounds issue 32 set.
func (r *hangReport) writeBounds(w io.Writer, res hangResult) {
	find := func(fault, mode, settings string) *hangRow {
		for i := range res.rows {
			if row := &res.rows[i]; row.fault == fault && row.mode == mode && row.settings == settings {
				return row
			}
		}
		return nil
	}
	var lines []string
	within := func(what string, row *hangRow, bound time.Duration) {
		switch {
		case row == nil || row.tried == 0:
			lines = append(lines, what+": not measured")
		case len(row.outcomes) < row.tried:
			lines = append(lines, fmt.Sprintf("%s: NOT MET, %d of %s not recovered within %s", what, row.tried-len(row.outcomes), english.Count(row.tried, "fault"), row.limit))
		default:
			m := medianRecovery(row.outcomes)
			line := fmt.Sprintf("%s: %s, %s", what, verdict(m <= bound), stats.Ms(m))
			if !slices.ContainsFunc(row.timeouts, func(t time.Duration) bool { return t > 0 }) {
				line += " (yet status showed no hang timeout: something else ended the hang)"
			}
			lines = append(lines, line)
		}
	}
	within("trainer stopped → training again ≤ 2s (median), default settings", find(faultStopped, "preload", "default"), 2*time.Second)
	within("trainer deadlocked → training again ≤ 10s, default settings", find(faultDeadlocked, "preload", "default"), 10*time.Second)
	if r.cfg.timeout == "1s" {
		within("trainer deadlocked → training again ≤ 2s, --hang-timeout 1s", find(faultDeadlocked, "preload", "--hang-timeout 1s"), 2*time.Second)
	}
	if row := find(faultDeadlocked, "warm", "default"); row == nil || len(row.outcomes) == 0 {
		lines = append(lines, "trainer deadlocked, elastic.save every step → ≤ 1 step lost: not measured (no fault recovered)")
	} else {
		most := 0
		for _, o := range row.outcomes {
			most = max(most, o.Lost)
		}
		lines = append(lines, fmt.Sprintf("trainer deadlocked, elastic.save every step → ≤ 1 step lost: %s, at most %s lost in %s", verdict(most <= 1), english.Count(most, "step"), english.Count(len(row.outcomes), "fault")))
	}
	for _, p := range res.pauses {
		// A pause within the default least hang timeout must cost no
		// restart; a longer one, undeclared, at most one in the run.
		bound := 0
		if p.pause >= defaultLeastTimeout {
			bound = 1
		}
		what := fmt.Sprintf("pausing %s every %d steps for %s → at most %s", p.pause, p.every, r.cfg.pauseRun, english.Count(bound, "hang restart"))
		switch {
		case p.generations == 0:
			lines = append(lines, what+": not measured")
		case p.timeout == 0:
			lines = append(lines, fmt.Sprintf("%s: not measured, nothing watched the ranks (status showed no hang timeout); %d", what, p.hangRestarts))
		default:
			lines = append(lines, fmt.Sprintf("%s: %s, %d", what, verdict(p.hangRestarts <= bound), p.hangRestarts))
		}
	}
	total, ok := 0, 0
	for _, row := range res.rows {
		for _, c := range row.stacks {
			total++
			if c.ok {
				ok++
			}
		}
	}
	if total == 0 {
		lines = append(lines, "stacks of both ranks in their logs, naming the function: not measured")
	} else {
		lines = append(lines, fmt.Sprintf("stacks of both ranks in their logs, naming the function: %s, %d of %d faults", verdict(ok == total), ok, total))
	}
	fmt.Fprintf(w, "\nissue 32's bounds (np %d):\n", res.np)
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}
