package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/english"
)

// The hang suite (-suite hang): rank 1 of a job hangs, its node's sidecar
// and guard alive, and the job is measured until every rank trains again;
// and jobs that pause now and then, which must not be taken for hung.

// Faults of the hang suite, on rank 1.
const (
	// faultStopped is a SIGSTOP of rank 1's trainer process alone.
	faultStopped = "stopped"
	// faultDeadlocked is rank 1's trainer asleep before its next step in
	// hangFunction, alive (trainer.py --hang-trigger).
	faultDeadlocked = "deadlocked"
)

// hangFunction is where a deadlocked trainer waits (trainer.py), the name
// its stack must show.
const hangFunction = "wait_forever_in_data_loader"

// hungRank is the rank every fault of the suite is aimed at.
const hungRank = 1

// hangConfig is what the hang suite adds to config.
type hangConfig struct {
	faults []string
	// limit is the longest wait for every rank to train again after a
	// fault on coordinator run; torchrunLimit under torchrun.
	limit         time.Duration
	torchrunLimit time.Duration
	// giveUp ends a row after this many faults that were not recovered
	// within the limit: each costs the whole limit.
	giveUp int
	// timeout is run's --hang-timeout of the rows that set one.
	timeout string
	// pauses are the pause runs' pause lengths, every pauseEvery steps,
	// each run lasting pauseRun.
	pauses     []time.Duration
	pauseEvery int
	pauseRun   time.Duration
}

// hangRow is one fault in one mode with one setting of run's flags. Every
// fault runs in a job of its own: a job's hang timeout grows after a hang
// restart, and a node that hangs twice is excluded, so a second fault in
// the same job would not measure the default.
type hangRow struct {
	fault    string
	mode     string // a mode's name, or "torchrun"
	settings string // "default", or run's flags
	runArgs  []string
	limit    time.Duration
	// tried counts the faults made; outcomes holds those recovered within
	// the limit.
	tried    int
	outcomes []outcome
	// timeouts are the hang timeouts status showed before each fault; 0
	// where it showed none.
	timeouts []time.Duration
	stacks   []stackCheck
	note     string
}

// hangRows are the suite's rows for the faults asked for. A mode this
// build cannot run gets a note and no faults.
func hangRows(h hangConfig, torchrun bool, missing map[string]string) []hangRow {
	var rows []hangRow
	for _, f := range h.faults {
		rows = append(rows, hangRow{fault: f, mode: "preload", settings: "default", limit: h.limit})
		if f == faultStopped {
			// Trained in place with a started spare: the stopped rank is
			// killed alone, its peer leaves the collective it waits in.
			rows = append(rows, hangRow{fault: f, mode: "inplace", settings: "default", limit: h.limit})
		}
		if f == faultDeadlocked {
			rows = append(rows,
				hangRow{fault: f, mode: "preload", settings: "--hang-timeout " + h.timeout, runArgs: []string{"--hang-timeout", h.timeout}, limit: h.limit},
				hangRow{fault: f, mode: "warm", settings: "default", limit: h.limit})
		}
		if torchrun {
			rows = append(rows, hangRow{fault: f, mode: "torchrun", settings: "-", limit: h.torchrunLimit})
		}
	}
	for i := range rows {
		r := &rows[i]
		if why, ok := missing[r.mode]; ok {
			r.note = "not available on this build: " + why
		} else if len(r.runArgs) > 0 && missing["hang-timeout"] != "" {
			r.note = "not available on this build: " + missing["hang-timeout"]
		}
	}
	return rows
}

// hangJob is a started job the suite faults: coordinator run's or
// torchrun's.
type hangJob interface {
	victim(rank int) (int, error)
	stepLogs() *session
	stop()
}

var (
	_ hangJob = (*coordinatorJob)(nil)
	_ hangJob = (*torchrunJob)(nil)
)

// measureHangRow makes the row's faults, each in a job of its own, until
// runs are made or giveUp of them were not recovered within the limit.
func measureHangRow(cfg *config, h hangConfig, np int, r *hangRow) {
	if r.note != "" {
		return
	}
	misses := 0
	for r.tried < cfg.runs && misses < h.giveUp {
		progress("np %d, %s, %s, %s: fault %d of %d", np, r.fault, r.mode, r.settings, r.tried+1, cfg.runs)
		ok, err := hangOnce(cfg, np, r)
		if err != nil {
			line, _, _ := strings.Cut(err.Error(), "\n")
			r.note = "failed: " + line
			progress("np %d, %s, %s: %v", np, r.fault, r.mode, err)
			return
		}
		r.tried++
		if !ok {
			misses++
		}
	}
	if misses > 0 && r.tried < cfg.runs {
		r.note = fmt.Sprintf("gave up after %s not recovered within %s", english.Count(misses, "fault"), r.limit)
	}
}

// hangOnce starts a job, makes the row's fault on rank 1, and waits for
// every rank to train again; ok is false when they did not within the
// row's limit.
func hangOnce(cfg *config, np int, r *hangRow) (ok bool, err error) {
	var job hangJob
	var coord *coordinatorJob
	if r.mode == "torchrun" {
		t, err := startTorchrun(cfg, np, 0, 0, []string{"--hang-trigger"})
		if err != nil {
			return false, err
		}
		job = t
	} else {
		m, _ := modeNamed(r.mode)
		coord, err = startCoordinator(cfg, np, m, 0, extras{runArgs: r.runArgs, trainerArgs: []string{"--hang-trigger"}, rankLogs: true})
		if err != nil {
			return false, err
		}
		job = coord
		// The column says "not shown" where status fails: the fault is
		// measured all the same.
		var timeout time.Duration
		if st, err := coord.status(); err != nil {
			progress("np %d, %s, %s: %v", np, r.fault, r.mode, err)
		} else if st.Slowest != nil {
			timeout = time.Duration(st.Slowest.HangTimeout * float64(time.Second)).Round(time.Millisecond)
		}
		r.timeouts = append(r.timeouts, timeout)
	}
	defer job.stop()
	s := job.stepLogs()
	s.beforeFault()
	pid, err := job.victim(hungRank)
	if err != nil {
		return false, err
	}
	gen := lastStep(s.logs.list(), pid).gen
	at, undo, err := inject(r.fault, pid, s.logs.dir)
	if err != nil {
		return false, err
	}
	defer undo()
	o, ok, err := s.waitRecovery(at, np, r.limit)
	if err != nil {
		return false, err
	}
	// A job that did not recover must have been hung: else the harness
	// measured nothing. (One that recovered was; and a stopped trainer
	// continued to dump its stack may finish the step it was in.)
	if last := lastStep(s.logs.list(), pid); !ok && last.at.After(at.Add(tookWithin)) {
		return false, fmt.Errorf("the fault did not take: rank %d's trainer stepped %s after it", hungRank, last.at.Sub(at).Round(time.Millisecond))
	}
	if ok {
		r.outcomes = append(r.outcomes, o)
	}
	if coord != nil {
		want := ""
		if r.fault == faultDeadlocked {
			want = hangFunction
		}
		r.stacks = append(r.stacks, coord.waitStacks(gen, want, ok))
	}
	return ok, nil
}

// inject makes the trainer of pid hang as fault says, and returns the
// fault's time and what undoes it, for the job's stop: a stopped process
// is continued, a deadlocked one's trigger removed.
func inject(fault string, pid int, logDir string) (time.Time, func(), error) {
	switch fault {
	case faultStopped:
		at := time.Now()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return at, func() {}, fmt.Errorf("stop trainer %d: %w", pid, err)
		}
		return at, func() { _ = syscall.Kill(pid, syscall.SIGCONT) }, nil
	case faultDeadlocked:
		trigger := filepath.Join(logDir, fmt.Sprintf("%d.hang", pid))
		at := time.Now()
		if err := os.WriteFile(trigger, nil, 0o644); err != nil {
			return at, func() {}, err
		}
		return at, func() { _ = os.Remove(trigger) }, nil
	}
	return time.Time{}, func() {}, fmt.Errorf("unknown fault %q", fault)
}

// tookWithin bounds how long after a fault the hung trainer may still
// finish a step: the one in flight (its 20 ms, and a checkpoint's save).
const tookWithin = 500 * time.Millisecond

// stackWait is how long after every rank trains again the harness waits
// for the old generation's stacks to reach the rank logs.
const stackWait = 2 * time.Second

// waitStacks checks the rank logs for the stacks of generation gen: at
// once when the job did not recover (whatever is there is all there will
// be), else until they are all there or stackWait has passed.
func (j *coordinatorJob) waitStacks(gen string, want string, recovered bool) stackCheck {
	deadline := time.Now()
	if recovered {
		deadline = deadline.Add(stackWait)
	}
	for {
		stacks, err := stacksOf(j.rankLogs, gen, j.cfg.script)
		if err != nil {
			return stackCheck{why: err.Error()}
		}
		c := checkStacks(stacks, j.np, hungRank, want)
		if c.ok || time.Now().After(deadline) {
			return c
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func modeNamed(name string) (mode, bool) {
	for _, m := range modes {
		if m.name == name {
			return m, true
		}
	}
	return mode{}, false
}
