package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/elastictraining/coordinator/bench/internal/stats"
)

// row is one scenario's faults in one job.
type row struct {
	scenario string
	outcomes []outcome
	note     string
}

// result is one job: a size, a mode and a state, its scenarios' rows and
// the step times of its steady stretches.
type result struct {
	np      int
	mode    string
	stateMB int
	rows    []row
	steps   []time.Duration
	// transient is the step times between a recovery and the steady window.
	transient []time.Duration
}

// fail notes err on the rows from the one at index from on: the job could
// not go on.
func (r *result) fail(from int, err error) {
	line, _, _ := strings.Cut(err.Error(), "\n")
	for k := from; k < len(r.rows); k++ {
		r.rows[k].note = "failed: " + line
	}
	progress("np %d, %s: %v", r.np, r.mode, err)
}

type report struct {
	date    time.Time
	machine string
	command string
	torch   string
	load    string
	// missing holds the modes this build cannot run, and why.
	missing map[string]string
	results []result
	took    time.Duration
	// steadyAfter is where the steady step times start after a recovery.
	steadyAfter time.Duration
	// header, if set, describes the job, its modes and its figures in
	// place of the PyTorch job's description; peer is the mode the others
	// are compared with (torchrun if empty).
	header func(io.Writer)
	peer   string
	// torchft, if set, is torchft's version and settings: it was measured
	// too.
	torchft string
}

var scenarioNames = map[string]string{
	"kill-rank":  "kill one rank",
	"kill-node":  "kill a node",
	"kill-guard": "kill a guard",
	"scale-up":   "scale up by one",
	"scale-down": "scale down by one",
	"alone":      "kill one rank: the survivor alone",
	"grown-back": "kill one rank: grown back",
}

func stateLabel(mb int) string {
	if mb == 0 {
		return "4MB"
	}
	return fmt.Sprintf("%dMB", mb)
}

func (r *report) write(w io.Writer) {
	if r.header != nil {
		r.header(w)
	} else {
		r.writeHeader(w)
	}
	r.writeTables(w)
}

// writeHeader describes the PyTorch job, its modes and the figures.
func (r *report) writeHeader(w io.Writer) {
	fmt.Fprintf(w, "bench-recovery: a PyTorch DDP job (bench/recovery/trainer.py: gloo on the CPU, a 334k-parameter MLP with Adam,\n")
	fmt.Fprintf(w, "steps padded to 20 ms) on coordinator run --np N (a process a node), and under torchrun in the same run.\n")
	if r.torchft != "" {
		fmt.Fprintf(w, "torchft ran the same model, data and step padding in bench/recovery/torchft_trainer.py, in the same run.\n")
	}
	var missing []string
	for _, m := range modes {
		if _, ok := r.missing[m.name]; ok {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(w, "PARTIAL: this build lacks what modes %s need; they were not measured.\n", strings.Join(missing, ", "))
	}
	fmt.Fprintf(w, "date: %s; took %s\n", r.date.Format("2006-01-02 15:04 MST"), r.took.Round(time.Second))
	fmt.Fprintf(w, "machine: %s; load average at the start %s\n", r.machine, r.load)
	fmt.Fprintf(w, "command: %s\n", r.command)
	fmt.Fprintf(w, "torch and torchrun: %s (2 agents or 4, c10d, --monitor_interval 0.1, last_call_timeout=1, -r 1 -t 1)\n", r.torch)
	if r.torchft != "" {
		fmt.Fprintf(w, "torchft: %s\n", r.torchft)
	}
	fmt.Fprintf(w, "\nmodes: cold = no preload, rank 0 saves to disk every 50 steps (torch.save, tmp + rename);\n")
	fmt.Fprintf(w, "       warm = --preload torch, elastic.save every step; preload and memory = each of the two alone;\n")
	fmt.Fprintf(w, "       spare = warm with --spares 1 (a node that registers, preloads and waits with no rank);\n")
	fmt.Fprintf(w, "       inplace = spare with --in-place: the trainer in elastic.run, the spare's start-up done ahead;\n")
	fmt.Fprintf(w, "       alone = in place with --np 1:N and no spare: a killed rank's survivor trains on alone, and the\n")
	fmt.Fprintf(w, "       job grows back once the rank's node has started its trainer again (both figures from the kill);\n")
	fmt.Fprintf(w, "       torchrun = the cold trainer under torchrun.\n")
	if r.torchft != "" {
		fmt.Fprintf(w, "       torchft = a lighthouse and N replica groups of one process (torchft's DDP: ProcessGroupGloo, a Manager\n")
		fmt.Fprintf(w, "       with min_replica_size=1 that heals a replica from a peer, PGTransport); a killed replica is started\n")
		fmt.Fprintf(w, "       again at once. Its rows are those of alone: its survivors step on in a smaller quorum (N-1\n")
		fmt.Fprintf(w, "       participants; a replica that heals does not participate in its first step), then grown back (N).\n")
		fmt.Fprintf(w, "       The lighthouse forms the survivors' quorum once the killed replica's heartbeat has timed out\n")
		fmt.Fprintf(w, "       (--heartbeat_timeout_ms); or, once more than half of the replicas it counts alive ask (N ≥ 3, or\n")
		fmt.Fprintf(w, "       the restarted one back), --join_timeout_ms after the first asked, if that is sooner. With N ≥ 3,\n")
		fmt.Fprintf(w, "       a survivor that is not the killed replica's neighbour in the allreduce asks only once the process\n")
		fmt.Fprintf(w, "       group's timeout has passed.\n")
	}
	for _, m := range modes {
		if why, ok := r.missing[m.name]; ok {
			fmt.Fprintf(w, "       %s: not available on this build (%s)\n", m.name, why)
		}
	}
	fmt.Fprintf(w, "\nfigures: median of the runs (min–max), from the trainers' own step logs.\n")
	fmt.Fprintf(w, "  TRAINING AGAIN  fault → the last rank of the new generation takes its first step (scale: from the command)\n")
	fmt.Fprintf(w, "  PAUSE           the old generation's last step, on any rank → the same end point\n")
	fmt.Fprintf(w, "  STEPS LOST      highest step done before, + 1, − the step the new generation resumed from\n")
	fmt.Fprintf(w, "  NEW TRAINER     of that: a new process's start (before import torch) → its first step, the slowest rank\n")
	fmt.Fprintf(w, "  WARM            of the new processes of every run, those that started with torch imported (a warm interpreter)\n")
	fmt.Fprintf(w, "kill a node: its sidecar, guard and trainers (torchrun: an agent that does not serve the store, and its\n")
	fmt.Fprintf(w, "worker) SIGKILLed at once; run starts the sidecar again, the harness starts another agent. With a spare,\n")
	fmt.Fprintf(w, "the next generation may take the spare while the killed node's sidecar starts again (and becomes the spare).\n")
	fmt.Fprintf(w, "kill a guard: the guard of the node whose trainer holds the rank, SIGKILLed alone; its trainer and warm\n")
	fmt.Fprintf(w, "interpreter die with it, its sidecar sweeps what they left and starts another guard.\n")
}

// writeTables gives every size's figures, step times and ratios.
func (r *report) writeTables(w io.Writer) {
	var sizes []int
	for _, res := range r.results {
		if len(sizes) == 0 || sizes[len(sizes)-1] != res.np {
			sizes = append(sizes, res.np)
		}
	}
	for _, np := range sizes {
		fmt.Fprintf(w, "\nnp %d\n", np)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SCENARIO\tMODE\tSTATE\tRUNS\tTRAINING AGAIN\tPAUSE\tSTEPS LOST\tNEW TRAINER\tWARM")
		for _, scenario := range []string{"kill-rank", "alone", "grown-back", "kill-node", "kill-guard", "scale-up", "scale-down"} {
			for _, res := range r.results {
				if res.np != np {
					continue
				}
				for _, row := range res.rows {
					if row.scenario != scenario {
						continue
					}
					state := stateLabel(res.stateMB)
					if r.header != nil {
						state = "-" // not trainer.py's state
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", scenarioNames[scenario], res.mode, state, len(row.outcomes), row.figures())
				}
			}
		}
		tw.Flush()
		r.writeSteps(w, np)
		r.writeRatios(w, np)
	}
}

// figures renders a row's columns from TRAINING AGAIN on.
func (row row) figures() string {
	if len(row.outcomes) == 0 {
		return row.note
	}
	var again, pause, start []time.Duration
	var lost []int
	news, warm := 0, 0
	for _, o := range row.outcomes {
		again, pause, lost = append(again, o.Recovery), append(pause, o.Pause), append(lost, o.Lost)
		if o.Start >= 0 {
			start = append(start, o.Start)
		}
		news, warm = news+o.New, warm+o.Warm
	}
	s := fmt.Sprintf("%s\t%s\t%s\t%s\t%d of %d", spread(again), spread(pause), spreadInts(lost), spread(start), warm, news)
	if row.note != "" {
		s += "\t" + row.note
	}
	return s
}

func spread(d []time.Duration) string {
	if len(d) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s–%s)", stats.Ms(stats.Median(d)), stats.Ms(stats.Quantile(d, 0)), stats.Ms(stats.Quantile(d, 1)))
}

func spreadInts(n []int) string {
	d := make([]time.Duration, len(n))
	for i, v := range n {
		d[i] = time.Duration(v)
	}
	return fmt.Sprintf("%d (%d–%d)", stats.Median(d), stats.Quantile(d, 0), stats.Quantile(d, 1))
}

// writeSteps gives each mode's steady step time, and what saving every
// step costs against cold, whose steps save once in 50: its median step
// is a step without a checkpoint.
func (r *report) writeSteps(w io.Writer, np int) {
	medians := map[string]time.Duration{}
	var parts []string
	for _, res := range r.results {
		if res.np != np || res.stateMB != 0 || len(res.steps) == 0 {
			continue
		}
		m := stats.Median(res.steps)
		medians[res.mode] = m
		parts = append(parts, fmt.Sprintf("%s %.1fms", res.mode, float64(m)/float64(time.Millisecond)))
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(w, "step time, steady (median of every rank's step intervals from %s after a recovery to the next fault): %s\n",
		r.steadyAfter, strings.Join(parts, ", "))
	var transient []string
	for _, res := range r.results {
		if res.np == np && res.stateMB == 0 && len(res.transient) > 0 {
			transient = append(transient, fmt.Sprintf("%s %.1fms", res.mode, float64(stats.Median(res.transient))/float64(time.Millisecond)))
		}
	}
	if len(transient) > 0 {
		fmt.Fprintf(w, "step time, right after a recovery (median, %s to %s after it; a used warm interpreter is replaced then): %s\n",
			warmup, r.steadyAfter, strings.Join(transient, ", "))
	}
	base := medians["cold"]
	for _, mode := range []string{"warm", "memory"} {
		if m, ok := medians[mode]; ok && base > 0 {
			fmt.Fprintf(w, "saving every step (%s) costs %+.1f%% of a step against cold (a step without a checkpoint)\n", mode, 100*(float64(m)/float64(base)-1))
		}
	}
}

// writeRatios compares the peers' (torchrun's, and torchft's if it ran)
// time to training again with each mode's, scenario by scenario; and
// torchft's grown back, every replica training again, with a killed
// rank's recovery in each mode.
func (r *report) writeRatios(w io.Writer, np int) {
	peers := []string{r.peer}
	if r.peer == "" {
		peers[0] = "torchrun"
	}
	if r.torchft != "" {
		peers = append(peers, torchftMode)
	}
	medians := map[string]time.Duration{}
	var order []string
	for _, res := range r.results {
		if res.np != np || res.stateMB != 0 {
			continue
		}
		for _, row := range res.rows {
			if len(row.outcomes) == 0 {
				continue
			}
			var d []time.Duration
			for _, o := range row.outcomes {
				d = append(d, o.Recovery)
			}
			key := row.scenario + "/" + res.mode
			medians[key] = stats.Median(d)
			if !slices.Contains(peers, res.mode) {
				order = append(order, key)
			}
		}
	}
	for _, peer := range peers {
		for _, key := range order {
			scenario, mode, _ := strings.Cut(key, "/")
			if theirs, ok := medians[scenario+"/"+peer]; ok && medians[key] > 0 {
				fmt.Fprintf(w, "%s, training again: %s takes %.1f× as long as %s\n", scenarioNames[scenario], peer, float64(theirs)/float64(medians[key]), mode)
			}
		}
	}
	theirs, ok := medians["grown-back/"+torchftMode]
	if !ok || r.torchft == "" {
		return
	}
	for _, key := range order {
		scenario, mode, _ := strings.Cut(key, "/")
		if scenario == "kill-rank" && medians[key] > 0 {
			fmt.Fprintf(w, "kill one rank, every rank training again with N: %s grown back takes %.1f× as long as %s\n", torchftMode, float64(theirs)/float64(medians[key]), mode)
		}
	}
}
