package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/elastictraining/coordinator/bench/internal/stats"
	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/trainerenv"
)

func main() {
	binary := flag.String("coordinator", "bin/coordinator", "the coordinator binary")
	python := flag.String("python", "/usr/bin/python3", "python interpreter")
	nodesFlag := flag.String("nodes", "4,16", "job sizes to measure")
	runs := flag.Int("runs", 7, "measurements per scenario")
	before := flag.String("before", "", "another coordinator binary to measure in the same run, such as the code before a change")
	beforeLabel := flag.String("before-label", "before", "what the rows of -before are called")
	torchrun := flag.Bool("torchrun", false, "also measure torchrun, an agent per node (c10d, 0.1 s monitor interval, 1 s last call)")
	out := flag.String("out", "", "also write the table here")
	flag.Parse()

	var results []result
	for _, s := range strings.Split(*nodesFlag, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			fatalf("-nodes %q: want sizes like 4,16", *nodesFlag)
		}
		base, err := measureBaseline(*python, n, *runs)
		if err != nil {
			fatalf("baseline with %d trainers: %v", n, err)
		}
		results = append(results, base)
		if *before != "" {
			r, err := measureCoordinator(*before, *python, n, *runs)
			if err != nil {
				fatalf("the coordinator before, with %d nodes: %v", n, err)
			}
			for i := range r {
				r[i].scenario = *beforeLabel + ": " + strings.TrimLeft(r[i].scenario, " ")
			}
			results = append(results, r...)
		}
		r, err := measureCoordinator(*binary, *python, n, *runs)
		if err != nil {
			fatalf("coordinator run with %d nodes: %v", n, err)
		}
		results = append(results, r...)
		// The same job with np a range whose maximum is n: the same n
		// trainers, restarted without waiting for the settle window.
		rng, err := measureRange(*binary, *python, n, *runs)
		if err != nil {
			fatalf("coordinator run with %d nodes, np a range: %v", n, err)
		}
		results = append(results, rng)
		if *torchrun {
			r, err := measureTorchrun(*python, n, *runs)
			if err != nil {
				fatalf("torchrun with %d processes: %v", n, err)
			}
			results = append(results, r)
		}
	}
	var buf bytes.Buffer
	report(&buf, results)
	os.Stdout.Write(buf.Bytes())
	if *out != "" {
		if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "restart: "+format+"\n", args...)
	os.Exit(1)
}

type result struct {
	scenario string
	nodes    int
	samples  []time.Duration
}

// start is one line of the trainer's log.
type start struct {
	gen, rank, world int
	at               time.Time
	pid              int
}

func readStarts(file string) []start {
	var out []start
	for _, f := range stats.Records(file, 5) {
		var s start
		s.gen, _ = strconv.Atoi(f[0])
		s.rank, _ = strconv.Atoi(f[1])
		s.world, _ = strconv.Atoi(f[2])
		secs, _ := strconv.ParseFloat(f[3], 64)
		s.at = time.Unix(0, int64(secs*1e9))
		s.pid, _ = strconv.Atoi(f[4])
		out = append(out, s)
	}
	return out
}

// waitStarted waits until world trainers have started after t0, one per
// rank, and returns the time the last of them started, their starts by rank,
// and the highest generation among them.
func waitStarted(file string, t0 time.Time, world int, timeout time.Duration) (time.Time, map[int]start, int, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ranks := map[int]start{}
		for _, s := range readStarts(file) {
			if s.at.After(t0) && s.world == world {
				ranks[s.rank] = s
			}
		}
		if len(ranks) == world {
			var last time.Time
			gen := 0
			for _, s := range ranks {
				if s.at.After(last) {
					last = s.at
				}
				gen = max(gen, s.gen)
			}
			return last, ranks, gen, nil
		}
		time.Sleep(2 * time.Millisecond) // a file, not a watch: poll it
	}
	return time.Time{}, nil, 0, fmt.Errorf("%d trainers did not all start within %s", world, timeout)
}

func measureCoordinator(binary, python string, n, runs int) ([]result, error) {
	return measureJob(binary, python, strconv.Itoa(n), n, runs, true)
}

// measureRange measures a trainer's kill in a job of np max(1, n/2):n.
func measureRange(binary, python string, n, runs int) (result, error) {
	np := fmt.Sprintf("%d:%d", max(1, n/2), n)
	r, err := measureJob(binary, python, np, n, runs, false)
	if err != nil {
		return result{}, err
	}
	r[0].scenario = fmt.Sprintf("np %s: kill one trainer → all running", np)
	return r[0], nil
}

// measureJob runs `coordinator run --np np` with n nodes: kill one
// trainer, runs times; and when scale is set, scale to n+1 and back.
func measureJob(binary, python, np string, n, runs int, scale bool) ([]result, error) {
	dir, err := os.MkdirTemp("", "bench-restart-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	log := filepath.Join(dir, "starts.log")
	script, _ := filepath.Abs("bench/noop_trainer.py")
	binary, err = filepath.Abs(binary)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, "run", "--np", np, "--job", "bench", "--max-restarts", "100000",
		"--grace-period", "5s", "--", python, script)
	cmd.Dir = dir // where run keeps the ranks' logs above 4 processes
	cmd.Env = append(os.Environ(), "BENCH_LOG="+log)
	var output proctest.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	endpoint, err := waitEndpoint(&output)
	if err != nil {
		return nil, err
	}
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: []string{endpoint}})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	client := jobclient.New(cli, membership.DefaultKeys())
	ctx := context.Background()

	_, ranks, gen, err := waitStarted(log, time.Time{}, n, time.Minute)
	if err != nil {
		return nil, err
	}
	if err := waitRunning(ctx, client, int64(gen), nil); err != nil {
		return nil, err
	}
	kill := result{scenario: "kill one trainer → all running", nodes: n}
	up := result{scenario: fmt.Sprintf("scale %d → %d → all running", n, n+1), nodes: n}
	down := result{scenario: fmt.Sprintf("scale %d → %d → all running", n+1, n), nodes: n}
	reported := result{scenario: "  as the coordinator reports it (detect → all acked running)", nodes: n}
	for i := range runs {
		victim := ranks[i%n]
		t0 := time.Now()
		if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
			return nil, fmt.Errorf("kill trainer %d: %w", victim.pid, err)
		}
		var last time.Time
		if last, ranks, gen, err = waitStarted(log, t0, n, time.Minute); err != nil {
			return nil, err
		}
		kill.samples = append(kill.samples, last.Sub(t0))
		if err := waitRunning(ctx, client, int64(gen), &reported); err != nil {
			return nil, err
		}
	}
	if !scale {
		return []result{kill, reported}, nil
	}
	for range runs {
		for _, step := range []struct {
			size int
			into *result
		}{{n + 1, &up}, {n, &down}} {
			t0 := time.Now()
			if _, err := client.Scale(ctx, "bench", membership.FixedNP(step.size)); err != nil {
				return nil, err
			}
			var last time.Time
			if last, _, gen, err = waitStarted(log, t0, step.size, time.Minute); err != nil {
				return nil, err
			}
			step.into.samples = append(step.into.samples, last.Sub(t0))
			if err := waitRunning(ctx, client, int64(gen), nil); err != nil {
				return nil, err
			}
		}
	}
	return []result{kill, reported, up, down}, nil
}

// measureBaseline starts n trainers at once, without any launcher: the
// floor under every restart on this machine.
func measureBaseline(python string, n, runs int) (result, error) {
	dir, err := os.MkdirTemp("", "bench-baseline-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	log := filepath.Join(dir, "starts.log")
	script, _ := filepath.Abs("bench/noop_trainer.py")
	res := result{scenario: "baseline: start the trainers directly", nodes: n}
	for range runs {
		t0 := time.Now()
		var cmds []*exec.Cmd
		for rank := range n {
			cmd := exec.Command(python, script)
			cmd.Env = append(os.Environ(), "BENCH_LOG="+log, trainerenv.ElasticGeneration+"=1",
				trainerenv.Rank+"="+strconv.Itoa(rank), trainerenv.WorldSize+"="+strconv.Itoa(n))
			if err := cmd.Start(); err != nil {
				return res, err
			}
			cmds = append(cmds, cmd)
		}
		last, _, _, err := waitStarted(log, t0, n, time.Minute)
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		if err != nil {
			return res, err
		}
		res.samples = append(res.samples, last.Sub(t0))
	}
	return res, nil
}

// waitRunning waits for the job to report generation gen Running, so that
// one measurement does not overlap the next; the restart time it reports
// goes into reported.
func waitRunning(ctx context.Context, client *jobclient.Client, gen int64, reported *result) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return client.WatchStatus(ctx, "bench", func(s membership.Status) (bool, error) {
		done := s.Phase == membership.JobRunning && s.Generation >= gen
		if done && reported != nil && s.Steps != nil {
			reported.samples = append(reported.samples, time.Duration(s.Steps.Total))
		}
		return done, nil
	})
}

// measureTorchrun runs one torchrun agent per node, as on n machines, with
// c10d rendezvous tuned to a 0.1 s monitor interval and a 1 s last call.
func measureTorchrun(python string, n, runs int) (result, error) {
	dir, err := os.MkdirTemp("", "bench-torchrun-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	log := filepath.Join(dir, "starts.log")
	script, _ := filepath.Abs("bench/noop_trainer.py")
	port, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		return result{}, err
	}
	for range n {
		// Debian's torchrun 1.13 spells its flags with underscores and needs
		// -r 1 -t 1 to start.
		cmd := exec.Command(python, "-m", "torch.distributed.run", "-r", "1", "-t", "1",
			"--nnodes", strconv.Itoa(n), "--nproc_per_node", "1", "--max_restarts", "100000", "--monitor_interval", "0.1",
			"--rdzv_backend", "c10d", "--rdzv_endpoint", fmt.Sprintf("127.0.0.1:%d", port), "--rdzv_id", "bench",
			"--rdzv_conf", "last_call_timeout=1", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "BENCH_LOG="+log)
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return result{}, err
		}
		defer func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}()
	}
	res := result{scenario: "torchrun, an agent per node: kill one trainer → all running", nodes: n}
	_, ranks, _, err := waitStarted(log, time.Time{}, n, 3*time.Minute)
	if err != nil {
		return res, err
	}
	for i := range runs {
		victim := ranks[i%n]
		t0 := time.Now()
		if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
			return res, err
		}
		var last time.Time
		if last, ranks, _, err = waitStarted(log, t0, n, 3*time.Minute); err != nil {
			return res, err
		}
		res.samples = append(res.samples, last.Sub(t0))
	}
	return res, nil
}

var endpointLine = regexp.MustCompile(`etcd serves on (\S+);`)

func waitEndpoint(out *proctest.Buffer) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if m := endpointLine.FindStringSubmatch(out.String()); m != nil {
			return m[1], nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return "", fmt.Errorf("coordinator run printed no endpoint:\n%s", out.String())
}

func report(w io.Writer, results []result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tNODES\tRUNS\tMEDIAN\t× FLOOR\tP90\tMIN\tMAX")
	medians := map[string]time.Duration{}
	floor := map[int]time.Duration{}
	for _, r := range results {
		if strings.HasPrefix(r.scenario, "baseline") {
			floor[r.nodes] = stats.Median(r.samples)
		}
	}
	for _, r := range results {
		med := stats.Median(r.samples)
		medians[fmt.Sprintf("%s/%d", r.scenario, r.nodes)] = med
		ratio := "-"
		if f := floor[r.nodes]; f > 0 && !strings.Contains(r.scenario, "as the coordinator reports it") {
			ratio = fmt.Sprintf("%.2f", float64(med)/float64(f))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.scenario, r.nodes, len(r.samples), stats.Ms(med), ratio,
			stats.Ms(stats.Quantile(r.samples, 0.9)), stats.Ms(stats.Quantile(r.samples, 0)), stats.Ms(stats.Quantile(r.samples, 1)))
	}
	tw.Flush()
	for _, r := range results {
		if !strings.HasPrefix(r.scenario, "torchrun") {
			continue
		}
		ours := medians[fmt.Sprintf("kill one trainer → all running/%d", r.nodes)]
		theirs := medians[fmt.Sprintf("%s/%d", r.scenario, r.nodes)]
		if ours > 0 {
			fmt.Fprintf(w, "kill recovery at %d nodes: torchrun takes %.1fx as long\n", r.nodes, float64(theirs)/float64(ours))
		}
	}
}
