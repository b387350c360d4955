package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// line is one line of the workers' log.
type line struct {
	kind       string // start, alive, commit, term
	gen        int64
	role       string
	rank, pid  int
	at         time.Time
	step       int
	world      int
	node       string
	lineNumber int
}

func (l line) String() string {
	return fmt.Sprintf("%s gen %d %s rank %d pid %d on %s at %s (step %d)", l.kind, l.gen, l.role, l.rank, l.pid, l.node,
		l.at.Format("15:04:05.000000"), l.step)
}

func readLog(path string) []line {
	data, _ := os.ReadFile(path)
	var out []line
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		f := strings.Fields(sc.Text())
		if len(f) != 9 {
			continue
		}
		l := line{kind: f[0], role: f[2], node: f[8], lineNumber: n}
		var errs [6]error
		l.gen, errs[0] = strconv.ParseInt(f[1], 10, 64)
		l.rank, errs[1] = strconv.Atoi(f[3])
		l.pid, errs[2] = strconv.Atoi(f[4])
		us, err := strconv.ParseInt(f[5], 10, 64)
		errs[3] = err
		l.step, errs[4] = strconv.Atoi(f[6])
		l.world, errs[5] = strconv.Atoi(f[7])
		if errs == [6]error{} {
			l.at = time.UnixMicro(us)
			out = append(out, l)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// result is what one run found.
type result struct {
	seed        uint64
	dir         string
	violations  []string
	tolerated   []string
	unexplained []string // stops of the job no fault accounts for
	injected    map[kind]int
	recovery    map[kind][]time.Duration
	goodput     float64
	phases      map[membership.JobPhase]time.Duration // time in each phase of the status
	lostSteps   int
	lostTime    time.Duration
	restarts    int // the budget the job spent
	hangs       hangFindings
	hangBudget  int // the hang budget the job spent
	failures    int // the training processes the run killed
	converged   time.Duration
	gens        int64
	runFor      time.Duration
}

// analyse checks a finished run's evidence against every invariant and
// measures it. Each invariant is a function of its own; this gathers what
// they found, in the order the report lists it.
func analyse(r *run, end time.Time, converged time.Duration, final membership.Status, convErr error,
	events []membership.Event, left []string) *result {
	res := &result{seed: r.cfg.Seed, dir: r.dir, injected: map[kind]int{}, recovery: map[kind][]time.Duration{},
		converged: converged, gens: final.Generation, runFor: end.Sub(r.start)}
	lines := readLog(r.log)
	r.mu.Lock()
	injections := slices.Clone(r.injections)
	samples := slices.Clone(r.samples)
	r.mu.Unlock()
	sort.Slice(injections, func(i, j int) bool { return injections[i].At.Before(injections[j].At) })
	for _, in := range injections {
		res.injected[in.Kind]++
	}

	res.violations = append(res.violations, ranksHeldTwice(lines)...)
	stale, thawed := aliveAfterLaterGeneration(lines, injections, r.cfg.Beat)
	res.violations = append(res.violations, stale...)
	res.tolerated = append(res.tolerated, thawed...)
	res.violations = append(res.violations, generationsWentBack(lines, samples)...)
	// After the quiet period the job runs at the target.
	if convErr != nil {
		res.violations = append(res.violations, fmt.Sprintf("no convergence: %v", convErr))
	}
	// After the teardown nothing the run started survives.
	for _, p := range left {
		res.violations = append(res.violations, "survived the teardown: "+p)
	}
	var lost []string
	res.lostSteps, lost = lostProgress(lines, injections, events, r.start, r.cfg)
	res.violations = append(res.violations, lost...)
	res.lostTime = time.Duration(res.lostSteps) * r.cfg.Beat
	var overspent []string
	res.restarts = int(final.Restarts)
	res.failures, overspent = restartBudget(injections, events, res.restarts)
	res.violations = append(res.violations, overspent...)

	// The hang watch ends hangs in time, and nothing else.
	res.hangBudget = final.HangRestarts
	res.hangs = checkHangs(lines, injections, events, final.HangRestarts, r.cfg)
	res.violations = append(res.violations, res.hangs.violations...)
	res.tolerated = append(res.tolerated, res.hangs.tolerated...)

	res.goodput, res.recovery, res.unexplained = availability(lines, injections, events, r.start, end, r.cfg)
	res.phases = timeInPhases(samples, end)
	return res
}

// ranksHeldTwice checks that within a generation no (role, rank) is held
// by two processes: the fence's first promise.
func ranksHeldTwice(lines []line) (violations []string) {
	holders := map[string]line{}
	for _, l := range lines {
		if l.kind != "start" {
			continue
		}
		key := fmt.Sprintf("%d/%s/%d", l.gen, l.role, l.rank)
		if first, ok := holders[key]; ok && first.pid != l.pid {
			violations = append(violations, fmt.Sprintf("rank held twice: %s rank %d of generation %d by pid %d on %s (%s) and pid %d on %s (%s)",
				l.role, l.rank, l.gen, first.pid, first.node, first.at.Format("15:04:05.000"), l.pid, l.node, l.at.Format("15:04:05.000")))
		} else if !ok {
			holders[key] = l
		}
	}
	return violations
}

// aliveAfterLaterGeneration checks that no process of generation g is seen
// alive once a later generation has started. The one thing tolerated is a
// heartbeat of a process of a frozen node in the moment it is thawed,
// before the guard's overdue timer kills it (it can commit nothing: see
// docs/design.md).
func aliveAfterLaterGeneration(lines []line, injections []injection, beat time.Duration) (violations, tolerated []string) {
	firstStart := map[int64]line{}
	var gens []int64
	for _, l := range lines {
		if l.kind == "start" {
			if _, ok := firstStart[l.gen]; !ok {
				firstStart[l.gen] = l
				gens = append(gens, l.gen)
			}
		}
	}
	slices.Sort(gens)
	thaws := thawTimes(injections)
	type overlap struct {
		first, last line
		count       int
		evidence    string
	}
	var overlaps []*overlap
	byPid := map[int]*overlap{}
	for _, l := range lines {
		i, _ := slices.BinarySearch(gens, l.gen+1)
		for _, g := range gens[i:] {
			s := firstStart[g]
			if l.at.Before(s.at) {
				continue
			}
			if o := byPid[l.pid]; o != nil {
				o.last, o.count = l, o.count+1
				break
			}
			o := &overlap{first: l, last: l, count: 1,
				evidence: fmt.Sprintf("%s, %s after generation %d started (%s)", l, l.at.Sub(s.at).Round(time.Microsecond), g, s)}
			byPid[l.pid] = o
			overlaps = append(overlaps, o)
			break
		}
	}
	for _, o := range overlaps {
		if t, ok := thaws[o.first.node]; ok && o.count == 1 && thawedJustBefore(t, o.first.at, beat) {
			tolerated = append(tolerated, "thawed: "+o.evidence)
		} else if o.count == 1 {
			violations = append(violations, "alive after a later generation started: "+o.evidence)
		} else {
			violations = append(violations, fmt.Sprintf("alive after a later generation started: %s, and %d lines more until %s", o.evidence, o.count-1,
				o.last.at.Format("15:04:05.000000")))
		}
	}
	return violations, tolerated
}

// generationsWentBack checks that generations only increase: each node
// starts ever newer generations, no generation starts after a newer one
// did, and the status never goes back.
func generationsWentBack(lines []line, samples []statusSample) (violations []string) {
	violate := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }
	lastOfNode := map[string]line{}
	var newest line
	for _, l := range lines {
		if l.kind != "start" {
			continue
		}
		if prev, ok := lastOfNode[l.node]; ok && l.gen < prev.gen {
			violate("node %s started generation %d after generation %d (%s, then %s)", l.node, l.gen, prev.gen, prev, l)
		}
		lastOfNode[l.node] = l
		if newest.kind != "" && l.gen < newest.gen {
			violate("generation %d started after generation %d had (%s, then %s)", l.gen, newest.gen, newest, l)
		}
		if l.gen > newest.gen {
			newest = l
		}
	}
	for i := 1; i < len(samples); i++ {
		if samples[i].Generation < samples[i-1].Generation {
			violate("the status went back from generation %d (%s) to %d (%s)", samples[i-1].Generation,
				samples[i-1].At.Format("15:04:05.000"), samples[i].Generation, samples[i].At.Format("15:04:05.000"))
		}
	}
	return violations
}

// lostProgress counts the steps the job lost, and checks that checkpoints
// never go back and that a generation loses at most one checkpoint
// interval of progress per fault since the last commit. Steps a process
// takes after its SIGTERM (a slow stop) are not progress: its generation
// is over, and nothing it saves is stored. Nor are those after its
// generation was stopped for a hang: its ranks get no SIGTERM, they write
// their stacks and are killed 200 ms later, stepping meanwhile.
func lostProgress(lines []line, injections []injection, events []membership.Event, start time.Time, cfg config) (lostSteps int, violations []string) {
	violate := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }
	var lastCommit line
	best := 0
	resumed := map[int64]bool{}
	stopping := map[int]bool{}
	hungAt := map[int64]time.Time{}
	for _, h := range hangStops(events) {
		hungAt[h.gen] = h.at
	}
	for _, l := range lines {
		if l.rank != 0 {
			continue
		}
		switch l.kind {
		case "term":
			stopping[l.pid] = true
		case "commit":
			// A copy in memory is stored on its node and replicated after:
			// a node lost may take the last steps with it, so on the warm
			// path a checkpoint may go back across a fault, never without
			// one (that would be a stale generation's save accepted).
			wentBack := lastCommit.kind != "" && l.step <= lastCommit.step
			if wentBack && (!cfg.Warm || !faultBetween(injections, lastCommit.at, l.at)) {
				violate("checkpoint went back: %s after %s", l, lastCommit)
			}
			lastCommit = l
		case "start":
			if resumed[l.gen] {
				break
			}
			resumed[l.gen] = true
			lost := max(best-l.step, 0)
			lostSteps += lost
			since := start
			if lastCommit.kind != "" {
				since = lastCommit.at
			}
			hits := 0
			for _, in := range injections {
				if in.At.After(since) && in.At.Before(l.at) {
					hits++
				}
			}
			if allowed := cfg.CkptEvery * max(hits, 1); lost > allowed {
				violate("generation %d resumed from step %d, %d steps behind step %d reached before; %d faults since the last commit allow %d (%s)",
					l.gen, l.step, lost, best, hits, allowed, l)
			}
		}
		if at, hung := hungAt[l.gen]; hung && l.at.After(at) {
			stopping[l.pid] = true
		}
		if l.kind == "commit" || l.kind == "alive" && !stopping[l.pid] {
			best = max(best, l.step)
		}
	}
	return lostSteps, violations
}

// restartBudget counts the training processes the run killed, and checks
// that the restart budget is spent on those real failures only.
func restartBudget(injections []injection, events []membership.Event, restarts int) (failures int, violations []string) {
	for _, in := range injections {
		if (in.Kind == killTrainer || in.Kind == slowStop) && strings.Contains(in.Note, "killed trainer") {
			failures++
		}
	}
	if restarts > failures {
		var charged []string
		for _, e := range events {
			if e.Type == "GenerationStopping" && strings.Contains(e.Message, "exit") {
				charged = append(charged, fmt.Sprintf("%s gen %d: %s", e.Time.Format("15:04:05.000"), e.Generation, e.Message))
			}
		}
		violations = append(violations, fmt.Sprintf("restart budget: %d spent, %d training processes killed; stops for failures: %s", restarts, failures,
			strings.Join(charged, "; ")))
	}
	return failures, violations
}

// timeInPhases is how long the status sampled before end stayed in each
// phase.
func timeInPhases(samples []statusSample, end time.Time) map[membership.JobPhase]time.Duration {
	phases := map[membership.JobPhase]time.Duration{}
	for i := 1; i < len(samples); i++ {
		if samples[i].At.Before(end) {
			phases[samples[i-1].Phase] += samples[i].At.Sub(samples[i-1].At)
		}
	}
	return phases
}

// thawTimes is, per node, the times its frozen processes were continued.
func thawTimes(injections []injection) map[string][]time.Time {
	out := map[string][]time.Time{}
	for _, in := range injections {
		if in.Kind == freezeNode {
			id := fmt.Sprintf("n%d", in.Node)
			out[id] = append(out[id], in.At.Add(in.For))
		}
	}
	return out
}

// thawedJustBefore reports whether at falls within a heartbeat (and the
// scheduling slack of a machine under load) after one of the thaws.
func thawedJustBefore(thaws []time.Time, at time.Time, beat time.Duration) bool {
	for _, t := range thaws {
		if d := at.Sub(t); d >= -50*time.Millisecond && d <= beat+100*time.Millisecond {
			return true
		}
	}
	return false
}

// faultBetween reports whether a fault was injected between from and to.
func faultBetween(injections []injection, from, to time.Time) bool {
	for _, in := range injections {
		if in.At.After(from) && in.At.Before(to) {
			return true
		}
	}
	return false
}
