package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/elastictraining/coordinator/autoscale"
	"github.com/elastictraining/coordinator/bench/internal/policysim"
)

func main() {
	jobs := flag.Int("jobs", 100, "jobs a trace")
	interarrival := flag.Duration("interarrival", 90*time.Second, "mean time between arrivals")
	work := flag.Float64("median-work", 16*3600, "median work of a job, in worker-seconds")
	restart := flag.Duration("restart-cost", 30*time.Second, "time a job makes no progress after each change of its size")
	seeds := flag.Int("seeds", 3, "traces, seeds 1..N")
	out := flag.String("out", "", "also write the table here")
	flag.Parse()
	if err := run(*jobs, *interarrival, *work, *restart, *seeds, *out); err != nil {
		fmt.Fprintln(os.Stderr, "edlsim:", err)
		os.Exit(1)
	}
}

func run(jobs int, interarrival time.Duration, work float64, restart time.Duration, seeds int, out string) error {
	// The seed's cluster: 133 nodes, 2,348 allocatable CPU (87 of 18, 46
	// of 17); 5-CPU trainers.
	var nodes []int64
	var capacity int64
	for i := range 133 {
		c := int64(17000)
		if i < 87 {
			c = 18000
		}
		nodes = append(nodes, c)
		capacity += c
	}
	policy, err := autoscale.New(autoscale.Config{})
	if err != nil {
		return err
	}
	scalers := []policysim.Scaler{policysim.Fixed{}, policysim.EDL{Period: 5 * time.Second, MaxLoad: 0.97, Capacity: capacity},
		policysim.Policy{Policy: policy}}
	w := io.Writer(os.Stdout)
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	fmt.Fprintf(w, "# The autoscale policy on synthetic traces (go run ./bench/edlsim)\n\n")
	fmt.Fprintf(w, "%d jobs a trace, Poisson arrivals every %s on average, work log-normal around %.0f worker-hours, min 1-4 and max 8-60 trainers of 5 CPU,\n",
		jobs, interarrival, work/3600)
	fmt.Fprintf(w, "Amdahl speedup with a serial fraction up to 5 %%, %s lost at every change of a job's size; 133 nodes, 2,348 CPU. Default policy (cooldown %s, minimum gain %d and %.0f %%).\n\n",
		restart, policy.Config().Cooldown, policy.Config().MinGain, 100*policy.Config().MinGainFraction)
	fmt.Fprintln(w, "| seed | scaler | avg JCT | avg pending | utilization | restarts / job | restarts / job-hour |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for seed := 1; seed <= seeds; seed++ {
		trace := policysim.Synthetic(policysim.TraceConfig{Jobs: jobs, MeanInterarrival: interarrival, MedianWork: work,
			WorkerMilliCPU: 5000, Seed: uint64(seed)})
		for _, s := range scalers {
			r, err := policysim.Run(policysim.Config{NodeMilliCPU: nodes, RestartCost: restart, Limit: 14 * 24 * time.Hour}, trace, s)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %.1f %% | %.1f | %.2f |\n", seed, s.Name(), r.AvgJCT.Round(time.Second),
				r.AvgPending.Round(time.Second), 100*r.Utilization, r.RestartsPerJob, r.RestartsPerJobHour)
		}
	}
	return nil
}
