package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// availability measures the share of the run during which a whole
// generation was alive (every rank beating), and for each fault the time
// from the fault until a whole generation ran again, when the fault
// interrupted one.
func availability(lines []line, injections []injection, events []membership.Event, start, end time.Time, cfg config) (goodput float64, recovery map[kind][]time.Duration, unexplained []string) {
	const bucket = 250 * time.Millisecond
	n := int(end.Sub(start) / bucket)
	if n <= 0 {
		return 0, nil, nil
	}
	type key struct {
		gen  int64
		rank int
	}
	alive := make([]map[key]bool, n)
	world := map[int64]int{}
	for _, l := range lines {
		if l.kind == "start" {
			world[l.gen] = l.world
		}
		i := int(l.at.Sub(start) / bucket)
		if i < 0 || i >= n || l.kind != "alive" {
			continue
		}
		if alive[i] == nil {
			alive[i] = map[key]bool{}
		}
		alive[i][key{l.gen, l.rank}] = true
	}
	good := make([]bool, n)
	goodCount := 0
	for i, m := range alive {
		count := map[int64]int{}
		for k := range m {
			count[k.gen]++
		}
		for g, c := range count {
			if c >= world[g] && world[g] > 0 {
				good[i] = true
			}
		}
		if good[i] {
			goodCount++
		}
	}
	// A stop has been recovered from when every rank of its generation, or
	// of a later one, is alive.
	full := wholeGenerations(lines)
	backAfter := func(e membership.Event) time.Time {
		var back time.Time
		for _, f := range full {
			if f.gen >= e.Generation && (back.IsZero() || f.at.Before(back)) {
				back = f.at
			}
		}
		if back.IsZero() {
			return end
		}
		return back
	}
	recovery = map[kind][]time.Duration{}
	backAt := map[int]time.Time{} // by injection
	for _, e := range events {
		if e.Type != "GenerationStopping" {
			continue
		}
		i := cause(e, injections, cfg)
		if i < 0 {
			unexplained = append(unexplained, fmt.Sprintf("%s gen %d: %s", e.Time.Format("15:04:05.000"), e.Generation, e.Message))
			continue
		}
		if b := backAfter(e); b.After(backAt[i]) {
			backAt[i] = b
		}
	}
	for i, in := range injections {
		d := time.Duration(0) // no generation was interrupted
		if b, ok := backAt[i]; ok {
			d = max(b.Sub(in.At), 0)
		}
		recovery[in.Kind] = append(recovery[in.Kind], d)
	}
	return float64(goodCount) / float64(n), recovery, unexplained
}

// cause is the injection a stop of the job is due to, by the reason the
// coordinator gave: a lost member to the last fault of that node, or of
// etcd, that could have taken it out then; a failure to the last training
// process killed there; a membership change to the last scale or, failing
// that, the last fault of any node. -1 if none.
func cause(e membership.Event, injections []injection, cfg config) int {
	// A fault can stop the job until its end, plus a TTL for the lease to
	// run out, plus a stop timeout and a second of slack.
	reach := func(in injection) bool {
		return !in.At.After(e.Time) && e.Time.Sub(in.At) <= in.For+cfg.TTL+cfg.StopTimeout+time.Second
	}
	last := func(match func(injection) bool) int {
		for i := len(injections) - 1; i >= 0; i-- {
			if in := injections[i]; reach(in) && match(in) {
				return i
			}
		}
		return -1
	}
	words := strings.FieldsFunc(e.Message, func(r rune) bool { return r == ' ' || r == ',' || r == '(' || r == ')' })
	named := func(node int) bool { return slices.Contains(words, fmt.Sprintf("n%d", node)) }
	switch {
	case strings.Contains(e.Message, " lost"):
		return last(func(in injection) bool {
			switch in.Kind {
			case partition, freezeNode, freezeSidecar, freezeSupers, killSidecar:
				return named(in.Node)
			case quorumLoss, killEtcd:
				return true
			}
			return false
		})
	case strings.Contains(e.Message, "failed with exit code"):
		return last(func(in injection) bool {
			return in.Kind == killTrainer && named(in.Node) || in.Kind == slowStop && named(in.Peer)
		})
	case hangMessage.MatchString(e.Message):
		return last(func(in injection) bool {
			return (in.Kind == stopTrainer || in.Kind == deadlockTrainer || in.Kind == freezeNode) && named(in.Node)
		})
	case strings.HasPrefix(e.Message, "membership change"):
		if i := last(func(in injection) bool { return in.Kind == scale || in.Kind == scaleBurst }); i >= 0 {
			return i
		}
		return last(func(in injection) bool {
			switch in.Kind {
			case partition, freezeNode, freezeSidecar, freezeSupers, killSidecar, killTrainer, slowStop, quorumLoss, killEtcd:
				return true
			}
			return false
		})
	}
	return -1
}
