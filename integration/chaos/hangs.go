package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// The hang watch's promises, checked on the workers' log and the job's
// events: a hung trainer (stop-trainer, deadlock-trainer) costs no more
// than its hang timeout and a restart, and nothing else ever restarts the
// job for a hang (slow-rank, a straggler, least of all).

// hangRestart bounds the restart that follows a hang once it is found: the
// guard's next sample (100 ms), the leader's wait for the peers' reports
// (300 ms), stacks written and every rank killed at once (200 ms), the
// stop acked and the next plan written through etcd, and the next
// generation started and at its first step. That is the path of a killed
// trainer (0.13 s p50, 0.79 s max in `make chaos`; 1.7 s on the warm path,
// where a generation starts with elastic.load()), with slack for two cores
// shared with the trainers and a benchmark.
const hangRestart = 3 * time.Second

// stoppedLimit is how long the guard lets a process be stopped before it
// is hung, whatever its hang timeout (package guard's stoppedLimit).
const stoppedLimit = 500 * time.Millisecond

// hangStop is a stop of the job for a hang, as its events say it.
type hangStop struct {
	gen     int64 // the generation that hung
	at      time.Time
	rank    int
	node    string
	stopped bool   // "was stopped (SIGSTOP ...)", else "made no progress"
	timeout string // the hang timeout the message names, for a quiet rank
	message string
}

// hangMessage reads a hang's description (membership.Hang.String).
var hangMessage = regexp.MustCompile(`^rank (\d+) on node (\S+) (?:(was stopped) \(SIGSTOP|made no progress for \S+ \(hang timeout (\S+)\) (?:after step \d+|after its \d+(?:st|nd|rd|th) step in this process \(its own count: it names no step of the job\)|before its first step))`)

// hangStops are the stops of the job for a hang, one a generation: its
// RankHung event (of the generation that hung) or its GenerationStopping
// event (of the generation after it) with a hang's reason, the earlier.
func hangStops(events []membership.Event) []hangStop {
	byGen := map[int64]hangStop{}
	var gens []int64
	for _, e := range events {
		gen := e.Generation
		switch e.Type {
		case "RankHung":
		case "GenerationStopping":
			gen--
		default:
			continue
		}
		m := hangMessage.FindStringSubmatch(e.Message)
		if m == nil {
			continue
		}
		rank, _ := strconv.Atoi(m[1])
		h := hangStop{gen: gen, at: e.Time, rank: rank, node: m[2], stopped: m[3] != "", timeout: m[4], message: e.Message}
		prev, seen := byGen[gen]
		if !seen {
			gens = append(gens, gen)
		}
		if !seen || h.at.Before(prev.at) {
			byGen[gen] = h
		}
	}
	out := make([]hangStop, 0, len(gens))
	for _, g := range gens {
		out = append(out, byGen[g])
	}
	return out
}

// struckHang is a hang fault that struck a running trainer.
type struckHang struct {
	in  injection
	at  int   // its index in the injections
	gen int64 // the trainer's generation
}

// struckHangs are the stop-trainer and deadlock-trainer faults that
// struck a trainer: a stopped one by the generation its pid started in, a
// deadlocked one by its first hang line (one that took no step after the
// order is not struck).
func struckHangs(lines []line, injections []injection) []struckHang {
	var out []struckHang
	for i, in := range injections {
		if in.Pid == 0 || in.Kind != stopTrainer && in.Kind != deadlockTrainer {
			continue
		}
		node := fmt.Sprintf("n%d", in.Node)
		gen := int64(-1)
		for _, l := range lines {
			if l.pid != in.Pid || l.node != node {
				continue
			}
			if in.Kind == stopTrainer && l.kind == "start" && !l.at.After(in.At) {
				gen = l.gen
			}
			if in.Kind == deadlockTrainer && l.kind == "hang" && !l.at.Before(in.At) {
				gen = l.gen
				break
			}
		}
		if gen >= 0 {
			out = append(out, struckHang{in: in, at: i, gen: gen})
		}
	}
	return out
}

// holdsUp reports whether a fault can hold up the restart after a hang
// of generation gen: one of etcd, of the coordinator or a scale; one of a
// node that ran gen or runs the generation after it (a straggler
// excepted). A fault of a node on standby cannot, nor a move of etcd's
// lead.
func holdsUp(in injection, lines []line, gen int64) bool {
	switch in.Kind {
	case moveEtcdLeader, slowRank:
		return false
	case killCoordinator, killEtcd, quorumLoss, scale, scaleBurst:
		return true
	}
	for _, l := range lines {
		if l.kind == "start" && (l.gen == gen || l.gen == gen+1) &&
			(l.node == fmt.Sprintf("n%d", in.Node) || in.Kind == slowStop && l.node == fmt.Sprintf("n%d", in.Peer)) {
			return true
		}
	}
	return false
}

// reachOf is until when a fault can keep the job from running: its end, a
// TTL for a lease to run out, a stop timeout, and a second (cause's reach).
func reachOf(in injection, cfg config) time.Time {
	return in.At.Add(in.For + cfg.TTL + cfg.StopTimeout + time.Second)
}

// hangLimit is how long the guard takes to find a hang fault's trainer
// hung: the hang timeout for one that sleeps, stoppedLimit for one that
// is stopped.
func hangLimit(k kind, cfg config) time.Duration {
	if k == stopTrainer {
		return stoppedLimit
	}
	return cfg.HangTimeout
}

// hangDeadline is when the job must run whole again after a hang fault:
// its hangLimit and a restart after it, or a restart after the reach of
// another fault that was under way meanwhile and could hold the restart
// up. It reports whether another fault extended it.
func hangDeadline(s struckHang, lines []line, injections []injection, cfg config) (time.Time, bool) {
	deadline := s.in.At.Add(hangLimit(s.in.Kind, cfg) + hangRestart)
	extended := false
	for i, in := range injections {
		if !in.At.Before(deadline) {
			break
		}
		if i == s.at || !holdsUp(in, lines, s.gen) {
			continue
		}
		if reach := reachOf(in, cfg); reach.After(s.in.At) && reach.Add(hangRestart).After(deadline) {
			deadline, extended = reach.Add(hangRestart), true
		}
	}
	return deadline, extended
}

// hangFindings is what checkHangs found.
type hangFindings struct {
	violations, tolerated []string
	// recovery is, per struck hang fault, the time from the fault until
	// a later generation ran whole.
	recovery   map[kind][]time.Duration
	struck     int // hang faults that struck a trainer
	late       int // of them, ended past their deadline
	extended   int // of them, ended in time only thanks to another fault's reach
	slowed     int // slow-rank faults that slowed a running trainer
	stops      int // hang stops in the events
	falseStops int // of them, with no hang fault to explain them
}

// checkHangs checks the hang watch's promises: lines sorted by time,
// injections by injection.
//
//   - A hang ends in time: after a stop-trainer or deadlock-trainer fault
//     that struck a trainer of generation g, every rank of a later
//     generation is alive within the hang timeout (for a stopped trainer,
//     stoppedLimit) and hangRestart (hangDeadline: later if another fault
//     held the restart up).
//   - No false hang restart: every stop for a hang names a node whose
//     trainer of that generation a stop-trainer or deadlock-trainer fault
//     struck within its reach, and says what was done to it: stopped
//     (found after stoppedLimit, whatever the timeout), or no progress for
//     the hang timeout the sidecars were given. A whole node frozen past
//     the hang timeout (freeze-node) is expected to lose its lease, and the
//     generation to stop for that; should the lease outlive the freeze
//     (etcd changing leader extends leases), its rank made no progress for
//     longer than the timeout indeed, and a hang stop naming that node is
//     tolerated. So is, on the warm path, one of rank 0 on a node whose
//     sidecar alone was frozen: the worker waits in elastic.flush() every
//     step for its sidecar to store the save, and a freeze longer than the
//     hang timeout but short enough for the lease (TTL less the fence
//     margin, less the time since the last renewal) leaves it waiting past
//     the timeout, a hang by the watch's own words (a wait on a store that
//     does not answer). A straggler (slow-rank), frozen supervisors, a
//     partition or any other fault must never cause one.
//   - The hang budget is spent on those stops alone.
func checkHangs(lines []line, injections []injection, events []membership.Event, hangRestarts int, cfg config) hangFindings {
	f := hangFindings{recovery: map[kind][]time.Duration{}}
	violate := func(format string, args ...any) { f.violations = append(f.violations, fmt.Sprintf(format, args...)) }
	whole := wholeGenerations(lines)
	struck := struckHangs(lines, injections)
	f.struck = len(struck)

	for _, s := range struck {
		deadline, extended := hangDeadline(s, lines, injections, cfg)
		var back time.Time
		for _, w := range whole {
			if w.gen > s.gen && (back.IsZero() || w.at.Before(back)) {
				back = w.at
			}
		}
		if back.IsZero() || back.After(deadline) {
			f.late++
			seen := "never"
			if !back.IsZero() {
				seen = fmt.Sprintf("at %s, %s after it", back.Format("15:04:05.000"), back.Sub(s.in.At).Round(time.Millisecond))
			}
			violate("hang not ended in time: %s at %s struck pid %d of generation %d; a later generation ran whole %s, past %s (found hung after %s, a restart in %s%s)",
				s.in.Kind, s.in.At.Format("15:04:05.000"), s.in.Pid, s.gen, seen, deadline.Format("15:04:05.000"), hangLimit(s.in.Kind, cfg), hangRestart,
				map[bool]string{true: " after the other faults meanwhile", false: ""}[extended])
			continue
		}
		f.recovery[s.in.Kind] = append(f.recovery[s.in.Kind], max(back.Sub(s.in.At), 0))
		if extended && back.After(s.in.At.Add(hangLimit(s.in.Kind, cfg)+hangRestart)) {
			f.extended++
		}
	}

	f.slowed = slowed(lines, injections, cfg)

	stops := hangStops(events)
	f.stops = len(stops)
	for _, h := range stops {
		i := slices.IndexFunc(struck, func(s struckHang) bool {
			return fmt.Sprintf("n%d", s.in.Node) == h.node && s.gen == h.gen && !h.at.Before(s.in.At) && !h.at.After(reachOf(s.in, cfg))
		})
		if i >= 0 {
			s := struck[i]
			switch {
			case s.in.Kind == stopTrainer && !h.stopped:
				violate("hang stop of generation %d at %s does not say the trainer was stopped, though stop-trainer at %s stopped pid %d: %q",
					h.gen, h.at.Format("15:04:05.000"), s.in.At.Format("15:04:05.000"), s.in.Pid, h.message)
			case s.in.Kind == deadlockTrainer && (h.stopped || h.timeout != cfg.HangTimeout.String()):
				violate("hang stop of generation %d at %s does not say the trainer made no progress for the hang timeout %s, though deadlock-trainer at %s struck pid %d: %q",
					h.gen, h.at.Format("15:04:05.000"), cfg.HangTimeout, s.in.At.Format("15:04:05.000"), s.in.Pid, h.message)
			}
			continue
		}
		frozen := func(k kind) bool {
			return slices.ContainsFunc(injections, func(in injection) bool {
				return in.Kind == k && fmt.Sprintf("n%d", in.Node) == h.node && !h.at.Before(in.At) && !h.at.After(reachOf(in, cfg))
			})
		}
		switch {
		case frozen(freezeNode):
			f.tolerated = append(f.tolerated, fmt.Sprintf("hang after a whole node frozen past the hang timeout, its lease kept: generation %d at %s: %s",
				h.gen, h.at.Format("15:04:05.000"), h.message))
			continue
		case cfg.InPlace && slices.ContainsFunc(struck, func(s struckHang) bool {
			return s.gen == h.gen && !h.at.Before(s.in.At) && !h.at.After(reachOf(s.in, cfg))
		}):
			// The in-place worker steps in a collective: a rank hung stops
			// its peers in their next all_reduce at the same step, and the
			// one the watch names first may be a peer. Its generation is
			// over all the same: the named rank is killed, the hung one,
			// which cannot leave, is killed when its stop times out.
			f.tolerated = append(f.tolerated, fmt.Sprintf("hang named a peer that waited in a collective on the hung rank: generation %d at %s: %s",
				h.gen, h.at.Format("15:04:05.000"), h.message))
			continue
		case cfg.InPlace && !h.stopped && slices.ContainsFunc(injections, func(in injection) bool {
			return fmt.Sprintf("n%d", in.Node) != h.node && !h.at.Before(in.At) && !h.at.After(reachOf(in, cfg))
		}):
			// A peer's node killed, frozen or cut off keeps its lease for
			// the TTL, longer than the hang timeout: the survivors wait
			// for it in their collective, with no progress, meanwhile.
			f.tolerated = append(f.tolerated, fmt.Sprintf("hang of a rank waiting in a collective on a peer another fault struck: generation %d at %s: %s",
				h.gen, h.at.Format("15:04:05.000"), h.message))
			continue
		case cfg.Warm && h.rank == 0 && !h.stopped && frozen(freezeSidecar):
			f.tolerated = append(f.tolerated, fmt.Sprintf("hang of rank 0 waiting in elastic.flush() on its frozen sidecar, its lease kept: generation %d at %s: %s",
				h.gen, h.at.Format("15:04:05.000"), h.message))
			continue
		}
		f.falseStops++
		violate("false hang restart: generation %d stopped at %s for %q, with no trainer of node %s stopped or deadlocked before it",
			h.gen, h.at.Format("15:04:05.000"), h.message, h.node)
	}
	if hangRestarts > len(stops) {
		violate("hang budget: %d spent, %d stops for a hang in the events", hangRestarts, len(stops))
	}
	return f
}

// slowed counts the slow-rank faults during which a trainer of the node
// took a step at least Factor-1 heartbeats after its last: the straggler
// ran, and no hang stop may follow it.
func slowed(lines []line, injections []injection, cfg config) int {
	n := 0
	for _, in := range injections {
		if in.Kind != slowRank {
			continue
		}
		node, until := fmt.Sprintf("n%d", in.Node), in.At.Add(in.For)
		last := map[int]time.Time{}
		for _, l := range lines {
			if l.kind != "alive" || l.node != node || l.at.Before(in.At) || l.at.After(until) {
				continue
			}
			if prev, ok := last[l.pid]; ok && l.at.Sub(prev) >= time.Duration(in.Factor-1)*cfg.Beat {
				n++
				break
			}
			last[l.pid] = l.at
		}
	}
	return n
}

// wholeAt is when every rank of a generation was first alive.
type wholeAt struct {
	gen int64
	at  time.Time
}

// wholeGenerations are the generations every rank of which logged a step,
// each with the time its last rank did first.
func wholeGenerations(lines []line) []wholeAt {
	world := map[int64]int{}
	firstAlive := map[int64]map[int]time.Time{}
	for _, l := range lines {
		switch l.kind {
		case "start":
			world[l.gen] = l.world
		case "alive":
			if firstAlive[l.gen] == nil {
				firstAlive[l.gen] = map[int]time.Time{}
			}
			if _, ok := firstAlive[l.gen][l.rank]; !ok {
				firstAlive[l.gen][l.rank] = l.at
			}
		}
	}
	var out []wholeAt
	for g, ranks := range firstAlive {
		if len(ranks) < world[g] || world[g] == 0 {
			continue
		}
		var at time.Time
		for _, t := range ranks {
			if t.After(at) {
				at = t
			}
		}
		out = append(out, wholeAt{g, at})
	}
	slices.SortFunc(out, func(a, b wholeAt) int { return a.at.Compare(b.at) })
	return out
}
