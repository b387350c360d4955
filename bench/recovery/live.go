package main

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// liveJobs are the jobs running now, each with its stop: a job's processes
// run in a process group of their own, out of reach of the terminal's
// interrupt, so the harness stops them itself when it is interrupted.
type liveJobs struct {
	mu    sync.Mutex
	stops map[any]func()
	// closed is set by stopAll: a job started after it is stopped at once.
	closed bool
}

func newLiveJobs() *liveJobs { return &liveJobs{stops: map[any]func(){}} }

// add notes a started job and its stop.
func (l *liveJobs) add(job any, stop func()) {
	l.mu.Lock()
	l.stops[job] = stop
	closed := l.closed
	l.mu.Unlock()
	if closed {
		stop()
	}
}

// remove forgets job, and says whether it was there: a stop does its work
// once.
func (l *liveJobs) remove(job any) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.stops[job]
	delete(l.stops, job)
	return ok
}

// stopAll stops every job still running.
func (l *liveJobs) stopAll() {
	l.mu.Lock()
	l.closed = true
	stops := make([]func(), 0, len(l.stops))
	for _, stop := range l.stops {
		stops = append(stops, stop)
	}
	l.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

// onSignal runs cleanUp on SIGINT or SIGTERM, then exits 130 or 143, as
// run does.
func onSignal(cleanUp func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		progress("%v: stopping the jobs that run", sig)
		cleanUp()
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()
}

// sweep kills every process that carries the job's step log directory in
// its environment (BENCH_LOG_DIR): what a job's stop left, whatever its
// parent now is. The directory is the job's own, so no other process
// carries it.
// A process of the job's may start while the sweep kills its parent (a
// guard spawning a warm interpreter), so it sweeps until it finds none.
func sweep(logDir string) {
	for range 20 {
		pids := carrying("BENCH_LOG_DIR=" + logDir + "\x00")
		if len(pids) == 0 {
			return
		}
		_ = killAll(pids)
		time.Sleep(50 * time.Millisecond)
	}
}

// describe names each process by its pid and command line, for a report.
func describe(pids []int) []string {
	out := make([]string, len(pids))
	for i, pid := range pids {
		cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		out[i] = fmt.Sprintf("%d (%s)", pid, strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return out
}

// leftovers are the processes that carry the environment of any job of
// this harness (a BENCH_LOG_DIR under its own temporary directory): none
// should be left once a job is stopped.
func leftovers(tmp string) []int {
	return carrying("BENCH_LOG_DIR=" + tmp + string(filepath.Separator))
}

// carrying returns the processes, but this one, whose environment holds
// mark.
func carrying(mark string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, []byte(mark)) {
			out = append(out, pid)
		}
	}
	return out
}
