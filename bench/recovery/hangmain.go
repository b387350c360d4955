package main

import (
	"flag"
	"fmt"
	"strings"
	"time"
)

// registerHangFlags adds the hang suite's flags to fs; the returned
// function reads them once fs is parsed.
func registerHangFlags(fs *flag.FlagSet) func() (hangConfig, error) {
	var h hangConfig
	faults := fs.String("hang-faults", "stopped,deadlocked", "hang suite: faults on rank 1, stopped (SIGSTOP) and deadlocked (asleep, alive); empty for none")
	fs.DurationVar(&h.limit, "hang-limit", 30*time.Second, "hang suite: longest wait for every rank to train again after a fault on coordinator run")
	fs.DurationVar(&h.torchrunLimit, "torchrun-limit", 60*time.Second, "hang suite: longest wait for every rank to train again after a fault under torchrun")
	fs.IntVar(&h.giveUp, "give-up", 2, "hang suite: a row ends after this many faults not recovered within its limit")
	fs.StringVar(&h.timeout, "hang-timeout", "1s", "hang suite: run's --hang-timeout for the row that sets one")
	pauses := fs.String("pauses", "3s,30s", "hang suite: the pause runs' pauses, every rank at once; empty for none")
	fs.IntVar(&h.pauseEvery, "pause-every", 150, "hang suite: steps between two pauses")
	fs.DurationVar(&h.pauseRun, "pause-run", 5*time.Minute, "hang suite: how long each pause run lasts, from every rank's first step")
	return func() (hangConfig, error) {
		for _, f := range strings.Split(*faults, ",") {
			switch f = strings.TrimSpace(f); f {
			case "":
			case faultStopped, faultDeadlocked:
				h.faults = append(h.faults, f)
			default:
				return h, fmt.Errorf("-hang-faults: unknown fault %q: want stopped or deadlocked", f)
			}
		}
		for _, f := range strings.Split(*pauses, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			d, err := time.ParseDuration(f)
			if err != nil || d <= 0 {
				return h, fmt.Errorf("-pauses: %q: want durations like 3s,30s", f)
			}
			h.pauses = append(h.pauses, d)
		}
		switch {
		case h.limit <= 0 || h.torchrunLimit <= 0:
			return h, fmt.Errorf("-hang-limit and -torchrun-limit must be positive")
		case h.giveUp < 1:
			return h, fmt.Errorf("-give-up must be 1 or more")
		case h.pauseEvery < 1 || h.pauseRun <= 0:
			return h, fmt.Errorf("-pause-every and -pause-run must be positive")
		}
		return h, nil
	}
}

// featureHangTimeout is what a build lacks without run --hang-timeout.
const featureHangTimeout = "no --hang-timeout on coordinator run"

// measureHang runs the hang suite at every size and returns its report,
// but for its header's date, time taken and load.
func measureHang(cfg *config, h hangConfig, sizes []int, torchrun bool, missing map[string]bool) hangReport {
	rep := hangReport{cfg: h, settle: cfg.settle, missing: map[string]string{}}
	for _, name := range []string{"preload", "warm", "inplace"} {
		m, _ := modeNamed(name)
		if why := unavailable(m, missing); why != "" {
			rep.missing[name] = why
		}
	}
	if missing[featureHangTimeout] {
		rep.missing["hang-timeout"] = featureHangTimeout
	}
	rep.version, _ = output(cfg.coordinator, "version")
	rep.runCommand = "coordinator run --np N --job bench --preload torch --log-dir DIR --tee none [--hang-timeout " + h.timeout + "] -- " +
		cfg.python + " bench/recovery/trainer.py --checkpoint disk --every 50 --path DIR/checkpoint.pt --state-mb 0 --hang-trigger" +
		" (warm: --checkpoint memory --every 1; pause runs: --pause-every N --pause-s S, no --hang-trigger)"
	for _, np := range sizes {
		res := hangResult{np: np, rows: hangRows(h, torchrun, rep.missing)}
		for i := range res.rows {
			measureHangRow(cfg, h, np, &res.rows[i])
		}
		for _, pause := range h.pauses {
			if why, ok := rep.missing["preload"]; ok {
				res.pauses = append(res.pauses, pauseRun{pause: pause, every: h.pauseEvery, note: "not available on this build: " + why})
				continue
			}
			progress("np %d, pause run: %s every %d steps for %s", np, pause, h.pauseEvery, h.pauseRun)
			res.pauses = append(res.pauses, measurePauses(cfg, h, np, pause))
		}
		rep.results = append(rep.results, res)
	}
	return rep
}
