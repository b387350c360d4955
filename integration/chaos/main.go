package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

func main() {
	cfg := defaults()
	seeds := flag.String("seeds", "1", "seeds to run: a list and ranges, e.g. 1,5,10-20")
	seconds := flag.Int("seconds", 120, "seconds of faults per seed")
	out := flag.String("out", "", "also write the report here")
	flag.StringVar(&cfg.Binary, "coordinator", "bin/coordinator", "the coordinator binary")
	flag.StringVar(&cfg.EtcdBinary, "etcd-coordinator", "", "the coordinator binary that runs the etcd members, if not -coordinator (to try an older build)")
	flag.StringVar(&cfg.Worker, "worker", "integration/chaos/worker.sh", "the training process")
	flag.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "sidecars (more than np: the rest stand by)")
	flag.IntVar(&cfg.NP, "np", cfg.NP, "the target at the start")
	flag.IntVar(&cfg.Spares, "spares", cfg.Spares, "the job's spares (a spec setting; the nodes beyond np stand by either way)")
	flag.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "the sidecars' lease TTL and the coordinators' session TTL")
	flag.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "the coordinators' stop timeout")
	flag.BoolVar(&cfg.Keep, "keep", false, "keep every run's directory, not only a failing one's")
	flag.BoolVar(&cfg.Warm, "warm", false, "the warm path: python3 worker.py under --preload, saving every step to the sidecars' memory (-worker defaults to integration/chaos/worker.py)")
	flag.BoolVar(&cfg.InPlace, "in-place", false, "training in place: python3 worker_inplace.py (elastic.run, a collective every step) under --in-place, survivors keeping their processes and each node a started spare, saving every step to the sidecars' memory")
	flag.StringVar(&cfg.Python, "python", "/usr/bin/python3", "the in-place worker's interpreter: one that imports torch")
	flag.Parse()
	if cfg.InPlace {
		cfg.Warm = true
		if !isFlagSet("worker") {
			cfg.Worker = "integration/chaos/worker_inplace.py"
		}
	}
	if cfg.Warm {
		if !isFlagSet("worker") && !cfg.InPlace {
			cfg.Worker = "integration/chaos/worker.py"
		}
		// Saved every step: a fault may cost the step in flight and the
		// replica's lag behind it.
		cfg.CkptEvery = 2
	}
	list, err := parseSeeds(*seeds)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: -seeds: %v\n", err)
		os.Exit(2)
	}
	cfg.Duration = time.Duration(*seconds) * time.Second
	if cfg.Binary, err = filepath.Abs(cfg.Binary); err == nil {
		cfg.Worker, err = filepath.Abs(cfg.Worker)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var results []*result
	for _, seed := range list {
		cfg.Seed = seed
		res, err := runSeed(ctx, cfg, os.Stderr)
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos: seed %d: %v\n", seed, err)
			os.Exit(1)
		}
		results = append(results, res)
		if ctx.Err() != nil {
			break
		}
	}
	var w io.Writer = os.Stdout
	var file *os.File
	if *out != "" {
		if file, err = os.Create(*out); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
			os.Exit(1)
		}
		defer file.Close()
		w = io.MultiWriter(os.Stdout, file)
	}
	summarise(w, cfg, results)
	for _, r := range results {
		if len(r.violations) > 0 {
			os.Exit(1)
		}
	}
}

// defaults are the settings of `make chaos` and of the short run in
// `make test`.
func defaults() config {
	return config{
		plan:        plan{Nodes: 5, NP: 3, TTL: 3 * time.Second, StopTimeout: 4 * time.Second},
		Replicas:    2,
		Beat:        50 * time.Millisecond,
		BeatEvery:   2,
		HangTimeout: 2 * time.Second,
		CkptEvery:   10,
		GracePeriod: 15 * time.Second,
		Converge:    90 * time.Second,
	}
}

// runSeed runs one seed, printing its schedule and what it found to log.
func runSeed(ctx context.Context, cfg config, log io.Writer) (*result, error) {
	fmt.Fprintf(log, "== seed %d: %s of faults, %d nodes, np %d, %d spares, TTL %s, stop timeout %s\n", cfg.Seed, cfg.Duration,
		cfg.Nodes, cfg.NP, cfg.Spares, cfg.TTL, cfg.StopTimeout)
	for _, f := range schedule(cfg.plan) {
		fmt.Fprintf(log, "   %s\n", f)
	}
	res, err := execute(ctx, cfg)
	if err != nil {
		return nil, err
	}
	for _, t := range res.tolerated {
		fmt.Fprintf(log, "   tolerated: %s\n", t)
	}
	for _, v := range res.violations {
		fmt.Fprintf(log, "   VIOLATION: %s\n", v)
	}
	if len(res.violations) > 0 {
		fmt.Fprintf(log, "   seed %d failed; the processes' logs are in %s\n   run it again: make chaos CHAOS_SEEDS=%d CHAOS_SECONDS=%d\n",
			cfg.Seed, res.dir, cfg.Seed, int(cfg.Duration.Seconds()))
	} else {
		fmt.Fprintf(log, "   seed %d passed: %d generations, goodput %.1f%%, converged %s after the last fault\n",
			cfg.Seed, res.gens, 100*res.goodput, res.converged.Round(100*time.Millisecond))
	}
	if len(res.phases) > 0 {
		fmt.Fprintf(log, "   time in each phase:")
		for _, p := range []membership.JobPhase{membership.JobRunning, membership.JobRestarting, membership.JobWaiting} {
			fmt.Fprintf(log, " %s %s", p, res.phases[p].Round(100*time.Millisecond))
		}
		fmt.Fprintln(log)
	}
	return res, nil
}

// parseSeeds reads "1,5,10-20".
func parseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a seed", part)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("%q is not a range of seeds", part)
			}
		}
		for seed := a; seed <= b; seed++ {
			out = append(out, seed)
		}
	}
	return out, nil
}

// isFlagSet reports whether the command line set the flag.
func isFlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
