package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// config is what every job of a run shares.
type config struct {
	// startup is the trainer's start-up stand-in, paid once per process.
	startup     time.Duration
	coordinator string
	python      string
	script      string
	runs        int
	settle      int
	steadyAfter time.Duration
	timeout     time.Duration
	phase       time.Duration
	runArgs     []string
	// tmp holds every job's directory, and nothing else's.
	tmp string
	// live holds the stops of the jobs running now, for the harness's end
	// on a signal.
	live *liveJobs
}

// startupArgs are the trainer's arguments for the start-up stand-in.
func (cfg *config) startupArgs() []string {
	if cfg.startup <= 0 {
		return nil
	}
	return []string{"--startup-s", strconv.FormatFloat(cfg.startup.Seconds(), 'f', -1, 64)}
}

func main() {
	cfg := config{live: newLiveJobs()}
	flags := flag.CommandLine
	flags.StringVar(&cfg.coordinator, "coordinator", "bin/coordinator", "the coordinator binary")
	flags.StringVar(&cfg.python, "python", "/usr/bin/python3", "python interpreter with torch")
	nps := flags.String("np", "2,4", "job sizes (nodes of one process)")
	flags.IntVar(&cfg.runs, "runs", 5, "faults per scenario and mode")
	modeList := flags.String("modes", "cold,warm,preload,memory,spare", "modes on coordinator run: cold, warm, preload, memory, spare (warm with --spares 1; not with -state-mb), inplace (spare with --in-place: the trainer in elastic.run, the spare's start-up done ahead), alone (in place with --np 1:N and no spare; kill-rank only)")
	scenarioList := flags.String("scenarios", "kill-rank,kill-node,kill-guard,scale", "scenarios: kill-rank, kill-node, kill-guard (its trainer dies with it; not under torchrun), scale (up by one and back)")
	torchrun := flags.Bool("torchrun", true, "also measure torchrun (kill-rank, kill-node) with the same trainer, at the base state")
	torchft := flags.Bool("torchft", false, "also measure torchft (kill-rank: the survivors alone, then grown back) with the same model in torchft_trainer.py, at the base state; -python needs torchft (bin/venv/bin/python)")
	var ft torchftSettings
	flags.StringVar(&ft.lighthouse, "torchft-lighthouse", "", "torchft's lighthouse binary; torchft_lighthouse beside -python if empty")
	flags.DurationVar(&ft.heartbeat, "torchft-heartbeat-timeout", time.Second, "the lighthouse's --heartbeat_timeout_ms: how long a replica that stopped heartbeating (a Manager heartbeats every 100 ms) still counts as alive; the survivors' next quorum waits that long for a killed replica, or -torchft-join-timeout if shorter (torchft's default, 5s, makes every kill cost 5 s)")
	flags.DurationVar(&ft.pgTimeout, "torchft-pg-timeout", 5*time.Second, "the replicas' ProcessGroupGloo timeout (torchft's train_ddp.py: 5 s): with 3 replicas or more, the survivors that are not the killed one's neighbours in the allreduce wait that long")
	flags.DurationVar(&ft.join, "torchft-join-timeout", 10*time.Second, "the lighthouse's --join_timeout_ms: how long a quorum waits for replicas that heartbeat but have not joined (torchft's README: 10 s)")
	aloneScenarios := flags.String("alone-scenarios", "kill-rank", "scenarios of the modes preload and memory (each feature alone)")
	stateMB := flags.Int("state-mb", 50, "the larger state, in MiB, for -state-scenarios")
	stateScenarios := flags.String("state-scenarios", "kill-rank", "scenarios measured again with the larger state; empty for none")
	flags.IntVar(&cfg.settle, "settle", 250, "steps every rank takes after a recovery before the next fault: 5 s at 20 ms, time for a used warm interpreter to be replaced (1 s later, then its imports) and for steady steps after that, as faults hours apart would leave it")
	flags.DurationVar(&cfg.steadyAfter, "steady-after", 3*time.Second, "how long after a recovery the steps count as steady (the step time): past a used warm interpreter's replacement, 1 s later, and its imports")
	flags.DurationVar(&cfg.phase, "phase", time.Second, "longest random wait before a fault: the disk checkpoint's interval, 50 steps")
	flags.DurationVar(&cfg.timeout, "timeout", 90*time.Second, "longest wait for every rank to train again")
	flags.DurationVar(&cfg.startup, "startup", 0, "a stand-in for a real job's start-up (imports, CUDA context, communicators, weights): the trainer sleeps this long once per process, torchrun's too")
	runArgs := flags.String("run-args", "", "more flags for coordinator run, space-separated (e.g. --checkpoint-memory ...)")
	out := flags.String("out", "", "also write the report here")
	suite := flags.String("suite", "recovery", "recovery (kills and scaling, -modes, -scenarios), hang (a hung rank and pausing jobs, the -hang-*, -pause* flags; the modes preload and warm), goodput (a fault every -every for -duration; -modes warm,spare by default) or paddle (a real PaddlePaddle job, kill-rank and kill-node of -scenarios, on run and, unless -torchrun=false, under PaddlePaddle's elastic launcher)")
	paddlePython := flags.String("paddle-python", "bin/venv/bin/python", "python interpreter with PaddlePaddle and etcd3, for -suite paddle (make venv)")
	hangConfig := registerHangFlags(flags)
	goodputConfig := registerGoodputFlags(flags)
	flag.Parse()
	if *suite != "recovery" && *suite != "hang" && *suite != "goodput" && *suite != "paddle" {
		fatalf("-suite %q: want recovery, hang, goodput or paddle", *suite)
	}
	h, err := hangConfig()
	if err != nil {
		fatalf("%v", err)
	}
	g, err := goodputConfig()
	if err != nil {
		fatalf("%v", err)
	}
	if *suite == "goodput" && !flagSet(flags, "modes") {
		*modeList = "warm,spare"
	}
	cfg.runArgs = strings.Fields(*runArgs)
	if cfg.coordinator, err = filepath.Abs(cfg.coordinator); err != nil {
		fatalf("%v", err)
	}
	// The jobs run in directories of their own: a relative interpreter
	// (bin/venv/bin/python) is the repository's.
	if strings.Contains(cfg.python, "/") {
		if cfg.python, err = filepath.Abs(cfg.python); err != nil {
			fatalf("%v", err)
		}
	}
	if cfg.script, err = filepath.Abs("bench/recovery/trainer.py"); err != nil {
		fatalf("%v", err)
	}
	if _, err := os.Stat(cfg.script); err != nil {
		fatalf("run from the repository's root: %v", err)
	}
	sizes, err := parseSizes(*nps)
	if err != nil {
		fatalf("-np: %v", err)
	}
	wanted, err := parseModes(*modeList)
	if err != nil {
		fatalf("-modes: %v", err)
	}
	scenarios, err := parseScenarios(*scenarioList)
	if err != nil {
		fatalf("-scenarios: %v", err)
	}
	large, err := parseScenarios(*stateScenarios)
	if err != nil {
		fatalf("-state-scenarios: %v", err)
	}
	alone, err := parseScenarios(*aloneScenarios)
	if err != nil {
		fatalf("-alone-scenarios: %v", err)
	}

	begun, loadAtStart := time.Now(), loadAverage()
	torchVersion, err := output(cfg.python, "-c", "import torch; print(torch.__version__)")
	if err != nil {
		fatalf("%s has no torch: %v", cfg.python, err)
	}
	if cfg.tmp, err = os.MkdirTemp("", "bench-recovery-"); err != nil {
		fatalf("%v", err)
	}
	onSignal(func() { cleanUp(&cfg) })
	torchftVersion := ""
	if *torchft && *suite == "recovery" {
		if torchftVersion, err = torchftSetup(cfg.python, &ft); err != nil {
			fatalf("-torchft: %v", err)
		}
	}
	missing := missingFeatures(&cfg)
	command := "go run ./bench/recovery " + strings.Join(os.Args[1:], " ")
	if *suite == "goodput" {
		rep := measureGoodput(&cfg, g, sizes, wanted, *torchrun, missing)
		rep.date, rep.took, rep.command, rep.torch, rep.python = begun, time.Since(begun), command, torchVersion, cfg.python
		rep.machine, rep.load = fmt.Sprintf("%d CPUs, %s", runtime.NumCPU(), cpuModel()), loadAtStart+", at the end "+loadAverage()
		rep.left = cleanUp(&cfg)
		var buf bytes.Buffer
		rep.write(&buf)
		writeReport(buf.Bytes(), *out)
		return
	}
	if *suite == "paddle" {
		runPaddleSuite(&cfg, *paddlePython, sizes, scenarios, *torchrun, begun, loadAtStart, command, *out)
		return
	}
	if *suite == "hang" {
		rep := measureHang(&cfg, h, sizes, *torchrun, missing)
		rep.date, rep.took, rep.command, rep.torch = begun, time.Since(begun), command, torchVersion
		rep.machine, rep.load = fmt.Sprintf("%d CPUs, %s", runtime.NumCPU(), cpuModel()), loadAtStart+", at the end "+loadAverage()
		rep.left = cleanUp(&cfg)
		var buf bytes.Buffer
		rep.write(&buf)
		writeReport(buf.Bytes(), *out)
		return
	}
	rep := report{
		date:    begun,
		machine: fmt.Sprintf("%d CPUs, %s", runtime.NumCPU(), cpuModel()),
		command: command,
		torch:   torchVersion,
		load:    loadAtStart,
		missing: map[string]string{}, steadyAfter: cfg.steadyAfter,
	}
	if *torchft {
		rep.torchft = fmt.Sprintf("%s (%s; %s)", torchftVersion, ft.describe(), cfg.python)
	}
	var available []mode
	for _, m := range wanted {
		if why := unavailable(m, missing); why != "" {
			rep.missing[m.name] = why
			continue
		}
		available = append(available, m)
	}
	states := []int{0}
	if len(large) > 0 && *stateMB > 0 {
		states = append(states, *stateMB)
	}
	for _, np := range sizes {
		for _, state := range states {
			want := scenarios
			if state > 0 {
				want = large
			}
			for _, m := range available {
				want := want
				if state > 0 && m.spares > 0 {
					continue
				}
				if state == 0 && (m.name == "preload" || m.name == "memory") {
					want = alone
				}
				if len(want) == 0 {
					continue
				}
				progress("np %d, %s, state %s: %s", np, m.name, stateLabel(state), strings.Join(want, ", "))
				rep.results = append(rep.results, measureCoordinator(&cfg, np, m, state, want))
			}
			if *torchrun && state == 0 {
				progress("np %d, torchrun, state %s", np, stateLabel(state))
				rep.results = append(rep.results, measureTorchrun(&cfg, np, state, want))
			}
			if *torchft && state == 0 && slices.Contains(want, "kill-rank") {
				progress("np %d, torchft, state %s", np, stateLabel(state))
				rep.results = append(rep.results, measureTorchft(&cfg, ft, np, want))
			}
		}
	}
	rep.took = time.Since(begun)
	rep.load += ", at the end " + loadAverage()
	cleanUp(&cfg)
	var buf bytes.Buffer
	rep.write(&buf)
	writeReport(buf.Bytes(), *out)
}

// cleanUp kills what is left of the jobs' processes, removes their
// directory, and returns the processes it found left, described.
func cleanUp(cfg *config) []string {
	cfg.live.stopAll()
	pids := leftovers(cfg.tmp)
	left := describe(pids)
	_ = killAll(pids)
	os.RemoveAll(cfg.tmp)
	if len(left) > 0 {
		progress("killed %d processes the jobs' stops left: %s", len(left), strings.Join(left, "; "))
	}
	return left
}

func writeReport(data []byte, out string) {
	os.Stdout.Write(data)
	if out != "" {
		if err := os.WriteFile(out, data, 0o644); err != nil {
			fatalf("%v", err)
		}
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "recovery: "+format+"\n", args...)
	os.Exit(1)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s recovery: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// flagSet says whether the command line set the flag named name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			return nil, fmt.Errorf("%q: want sizes of 2 or more, like 2,4", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseModes(s string) ([]mode, error) {
	var out []mode
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		found := false
		for _, m := range modes {
			if m.name == f {
				out, found = append(out, m), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown mode %q: want cold, warm, preload, memory, spare, inplace or alone", f)
		}
	}
	return out, nil
}

func parseScenarios(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case "":
		case "kill-rank", "kill-node", "kill-guard", "scale":
			out = append(out, f)
		default:
			return nil, fmt.Errorf("unknown scenario %q: want kill-rank, kill-node, kill-guard or scale", f)
		}
	}
	return out, nil
}

// features this build may lack, by the name the report gives them.
const (
	featurePreload = "no --preload on coordinator run"
	featureMemory  = "no elastic module on the trainer's path"
	featureSpares  = "no --spares on coordinator run"
	featureInPlace = "no --in-place on coordinator run"
)

// missingFeatures finds what this build lacks: --preload, --spares and
// --hang-timeout in run's help, and the elastic module importable by a
// trainer under run.
func missingFeatures(cfg *config) map[string]bool {
	missing := map[string]bool{}
	help, _ := output(cfg.coordinator, "run", "--help")
	if !strings.Contains(help, "--preload") {
		missing[featurePreload] = true
	}
	if !strings.Contains(help, "--spares") {
		missing[featureSpares] = true
	}
	if !strings.Contains(help, "--in-place") {
		missing[featureInPlace] = true
	}
	if !strings.Contains(help, "--hang-timeout") {
		missing[featureHangTimeout] = true
	}
	dir, err := os.MkdirTemp(cfg.tmp, "probe-")
	if err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"run", "--np", "1", "--job", "probe", "--max-restarts", "0"}, cfg.runArgs...)
	probe := exec.CommandContext(ctx, cfg.coordinator, append(args, "--", cfg.python, "-c", "import elastic")...)
	probe.Dir = dir
	if err := probe.Run(); err != nil {
		missing[featureMemory] = true
	}
	return missing
}

// unavailable says why mode m cannot run on this build, or "".
func unavailable(m mode, missing map[string]bool) string {
	var why []string
	if m.preload && missing[featurePreload] {
		why = append(why, featurePreload)
	}
	if m.memory && missing[featureMemory] {
		why = append(why, featureMemory)
	}
	if m.spares > 0 && missing[featureSpares] {
		why = append(why, featureSpares)
	}
	if m.inPlace && missing[featureInPlace] {
		why = append(why, featureInPlace)
	}
	return strings.Join(why, "; ")
}

func output(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return strings.TrimSpace(string(out)), err
}

func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// loadAverage is the machine's 1, 5 and 15 minute load: the machine may be
// shared, and a busy one slows every figure.
func loadAverage() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
