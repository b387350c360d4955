package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// summarise writes the report of every seed run and of them all together.
func summarise(w io.Writer, cfg config, results []*result) {
	fmt.Fprintf(w, "Chaos: %d seeds × %s of faults; real processes: 3 etcd members, %d coordinator replicas, %d sidecars (np %d at the start, %d spares),\n",
		len(results), cfg.Duration, cfg.Replicas, cfg.Nodes, cfg.NP, cfg.Spares)
	ckpt := fmt.Sprintf("checkpoint every %d steps", cfg.CkptEvery)
	switch {
	case cfg.InPlace:
		ckpt = fmt.Sprintf("training in place (--in-place, elastic.run, an all_reduce every step), a checkpoint in memory every step, %d steps lost allowed per fault", cfg.CkptEvery)
	case cfg.Warm:
		ckpt = fmt.Sprintf("warm path (--preload), a checkpoint in memory every step, %d steps lost allowed per fault", cfg.CkptEvery)
	}
	beats := fmt.Sprintf("progress reported every %d steps", cfg.BeatEvery)
	if cfg.Warm {
		beats = "progress reported every step"
	}
	fmt.Fprintf(w, "each sidecar behind proxies that can be cut; lease TTL %s, stop timeout %s, grace period %s; worker beat %s, %s;\n",
		cfg.TTL, cfg.StopTimeout, cfg.GracePeriod, cfg.Beat, ckpt)
	fmt.Fprintf(w, "hang timeout %s (fixed), %s.\n\n", cfg.HangTimeout, beats)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "seed\tfaults\tgenerations\tgoodput\tlost progress\trestarts spent / trainers killed\thang restarts / hangs\tconverged after\tviolations\t")
	injected := map[kind]int{}
	recovery := map[kind][]time.Duration{}
	var violations, lostSteps int
	var hf hangFindings
	hangRecovery := map[kind][]time.Duration{}
	var lost time.Duration
	var goodput float64
	for _, r := range results {
		faults := 0
		for k, n := range r.injected {
			faults += n
			injected[k] += n
		}
		for k, d := range r.recovery {
			recovery[k] = append(recovery[k], d...)
		}
		violations += len(r.violations)
		hf.stops += r.hangs.stops
		hf.falseStops += r.hangs.falseStops
		hf.extended += r.hangs.extended
		hf.slowed += r.hangs.slowed
		hf.struck += r.hangs.struck
		hf.late += r.hangs.late
		for k, d := range r.hangs.recovery {
			hangRecovery[k] = append(hangRecovery[k], d...)
		}
		lostSteps += r.lostSteps
		lost += r.lostTime
		goodput += r.goodput
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.1f%%\t%d steps (%s)\t%d / %d\t%d / %d\t%s\t%d\t\n", r.seed, faults, r.gens, 100*r.goodput,
			r.lostSteps, r.lostTime.Round(10*time.Millisecond), r.restarts, r.failures, r.hangBudget, r.hangs.struck,
			r.converged.Round(100*time.Millisecond), len(r.violations))
	}
	tw.Flush()
	if len(results) == 0 {
		return
	}
	fmt.Fprintf(w, "\nAll seeds: %d invariant violations; goodput %.1f%% on average; %d steps (%s) of progress lost in all.\n\n",
		violations, 100*goodput/float64(len(results)), lostSteps, lost.Round(10*time.Millisecond))
	fmt.Fprintf(w, "Hangs: %d trainers stopped or deadlocked; %d not ended within %s (stopped) or the hang timeout %s, and %s for the restart,\n",
		hf.struck, hf.late, stoppedLimit, cfg.HangTimeout, hangRestart)
	fmt.Fprintf(w, "%d more only thanks to another fault's reach meanwhile. %d stops for a hang in the events, %d false; %d of %d slow-rank faults slowed a running trainer.\n",
		hf.extended, hf.stops, hf.falseStops, hf.slowed, injected[slowRank])
	fmt.Fprint(w, "From the fault until a later generation ran whole:")
	for _, k := range []kind{stopTrainer, deadlockTrainer} {
		d := slices.Clone(hangRecovery[k])
		slices.Sort(d)
		if len(d) > 0 {
			fmt.Fprintf(w, " %s %s p50, %s max (%d);", k, ms(d[len(d)/2]), ms(d[len(d)-1]), len(d))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Recovery: from the fault until every rank of a generation runs again (0 when no generation was interrupted).")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\tinjected\tinterrupted\tp50\tmax\t")
	for _, k := range kinds {
		d := slices.Clone(recovery[k])
		slices.Sort(d)
		interrupted := 0
		for _, x := range d {
			if x > 0 {
				interrupted++
			}
		}
		p50, worst := "-", "-"
		if len(d) > 0 {
			p50, worst = ms(d[len(d)/2]), ms(d[len(d)-1])
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t\n", k, injected[k], interrupted, p50, worst)
	}
	tw.Flush()
	for _, r := range results {
		for _, v := range r.violations {
			fmt.Fprintf(w, "seed %d: %s\n", r.seed, v)
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
