package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// kind is a type of fault.
type kind string

const (
	killTrainer     kind = "kill-trainer"       // SIGKILL of a training process
	killSidecar     kind = "kill-sidecar"       // SIGKILL of a sidecar, restarted after For
	freezeNode      kind = "freeze-node"        // SIGSTOP of a sidecar and all below it for For (past the TTL)
	freezeSidecar   kind = "freeze-sidecar"     // SIGSTOP of a sidecar alone for For
	freezeSupers    kind = "freeze-supervisors" // SIGSTOP of a sidecar and its guard, not the trainers, for For (past the TTL)
	partition       kind = "partition"          // a node's links to etcd cut for For (past the TTL)
	killCoordinator kind = "kill-coordinator"   // SIGKILL of the coordinator leader, restarted after For
	killEtcd        kind = "kill-etcd"          // SIGKILL of an etcd member, restarted after For
	quorumLoss      kind = "quorum-loss"        // SIGKILL of two etcd members of three for For
	moveEtcdLeader  kind = "move-etcd-leader"   // etcd's lead handed to another member
	scale           kind = "scale"              // `coordinator scale` to NP
	scaleBurst      kind = "scale-burst"        // several scales Gap apart
	slowStop        kind = "slow-stop"          // a node answers SIGTERM after longer than the stop timeout, and another's trainer is killed
	stopTrainer     kind = "stop-trainer"       // SIGSTOP of a training process alone, continued after For if still there
	deadlockTrainer kind = "deadlock-trainer"   // a training process sleeps forever before its next step, alive
	slowRank        kind = "slow-rank"          // a node's trainer steps Factor times slower for For: a straggler, not a hang
)

// kinds in the order the report lists them.
var kinds = []kind{killTrainer, killSidecar, freezeNode, freezeSidecar, freezeSupers, partition, killCoordinator,
	killEtcd, quorumLoss, moveEtcdLeader, scale, scaleBurst, slowStop, stopTrainer, deadlockTrainer, slowRank}

// fault is one entry of a schedule: what happens, when, to whom.
type fault struct {
	At   time.Duration // from the start of the run
	Kind kind
	Node int           // the node (or etcd member) it strikes
	Peer int           // a second node or member: the trainer killed in a slow stop, the other member lost with quorum
	For  time.Duration // how long the fault lasts, or the delay before a restart
	NP   []int         // the targets of a scale or a burst
	Gap  time.Duration // between the scales of a burst
	// Factor is how many times slower a slow rank steps.
	Factor int
}

func (f fault) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%7.2fs %-18s", f.At.Seconds(), f.Kind)
	switch f.Kind {
	case killTrainer:
		fmt.Fprintf(&b, " node n%d", f.Node)
	case killSidecar:
		fmt.Fprintf(&b, " node n%d, back after %s", f.Node, f.For.Round(time.Millisecond))
	case freezeNode, freezeSidecar, freezeSupers, partition:
		fmt.Fprintf(&b, " node n%d for %s", f.Node, f.For.Round(time.Millisecond))
	case stopTrainer:
		fmt.Fprintf(&b, " node n%d, continued after %s", f.Node, f.For.Round(time.Millisecond))
	case deadlockTrainer:
		fmt.Fprintf(&b, " node n%d (the order withdrawn after %s)", f.Node, f.For.Round(time.Millisecond))
	case slowRank:
		fmt.Fprintf(&b, " node n%d %dx slower for %s", f.Node, f.Factor, f.For.Round(time.Millisecond))
	case killCoordinator:
		fmt.Fprintf(&b, " leader, back after %s", f.For.Round(time.Millisecond))
	case killEtcd:
		fmt.Fprintf(&b, " member etcd-%d for %s", f.Node, f.For.Round(time.Millisecond))
	case quorumLoss:
		fmt.Fprintf(&b, " members etcd-%d and etcd-%d for %s", f.Node, f.Peer, f.For.Round(time.Millisecond))
	case moveEtcdLeader:
		fmt.Fprintf(&b, " to etcd-%d (or the next member that does not lead)", f.Node)
	case scale:
		fmt.Fprintf(&b, " np %d", f.NP[0])
	case scaleBurst:
		fmt.Fprintf(&b, " np %v, %s apart", f.NP, f.Gap.Round(time.Millisecond))
	case slowStop:
		fmt.Fprintf(&b, " node n%d slow to stop for %s; trainer of n%d killed", f.Node, f.For.Round(time.Millisecond), f.Peer)
	}
	return b.String()
}

// plan is what the schedule is drawn for.
type plan struct {
	Seed        uint64
	Duration    time.Duration
	Nodes       int
	NP          int // the target at the start
	TTL         time.Duration
	StopTimeout time.Duration
}

// schedule draws the faults of a run from its seed alone: the same seed
// and plan give the same schedule. At most two nodes suffer a fault at a
// time and a node suffers one at a time, so that the job can run between
// faults; etcd and the coordinator suffer one fault at a time each. Every
// fault ends before the run does.
func schedule(p plan) []fault {
	rng := rand.New(rand.NewPCG(p.Seed, 0x636861_6f73)) // "chaos"
	uniform := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	busyNode := make([]time.Duration, p.Nodes) // until when each node is under a fault
	var busyEtcd, busyCoordinator time.Duration
	free := func(at time.Duration, except int) []int {
		var out []int
		faulted := 0
		for i, until := range busyNode {
			if until > at {
				faulted++
			} else if i != except {
				out = append(out, i)
			}
		}
		if faulted >= 2 {
			return nil
		}
		return out
	}
	npDraw := func() int { return 2 + rng.IntN(p.Nodes-2) } // 2 .. nodes-1: a node always on standby

	var out []fault
	at := uniform(2*time.Second, 4*time.Second)
	end := p.Duration - 2*time.Second
	for at < end {
		f := fault{At: at, Kind: kinds[rng.IntN(len(kinds))]}
		past := p.TTL + uniform(500*time.Millisecond, 3*time.Second) // past the TTL
		ok := true
		switch f.Kind {
		case killTrainer, killSidecar, freezeNode, freezeSidecar, freezeSupers, partition, stopTrainer, deadlockTrainer, slowRank:
			nodes := free(at, -1)
			if len(nodes) == 0 {
				ok = false
				break
			}
			f.Node = nodes[rng.IntN(len(nodes))]
			switch f.Kind {
			case killSidecar:
				f.For = uniform(200*time.Millisecond, 4*time.Second)
			case freezeNode, freezeSupers, partition:
				f.For = past
			case freezeSidecar:
				f.For = uniform(500*time.Millisecond, 2*p.TTL)
			case stopTrainer, deadlockTrainer:
				// Longer than the hang watch takes to end it, so that
				// a watch that missed it is seen missing it.
				f.For = uniform(3*time.Second, 6*time.Second)
			case slowRank:
				f.For = uniform(5*time.Second, 15*time.Second)
				f.Factor = 3 + rng.IntN(3)
			}
			busyNode[f.Node] = at + f.For + p.TTL
		case slowStop:
			nodes := free(at, -1)
			if len(nodes) < 2 {
				ok = false
				break
			}
			i := rng.IntN(len(nodes))
			f.Node = nodes[i]
			f.Peer = nodes[(i+1+rng.IntN(len(nodes)-1))%len(nodes)]
			f.For = uniform(3*time.Second, 6*time.Second)
			busyNode[f.Node] = at + f.For + p.TTL
			busyNode[f.Peer] = at + p.TTL
		case killCoordinator:
			if busyCoordinator > at {
				ok = false
				break
			}
			f.For = uniform(500*time.Millisecond, 4*time.Second)
			busyCoordinator = at + f.For + p.TTL
		case killEtcd, quorumLoss, moveEtcdLeader:
			if busyEtcd > at {
				ok = false
				break
			}
			f.Node = rng.IntN(3)
			switch f.Kind {
			case killEtcd:
				f.For = uniform(time.Second, 6*time.Second)
			case quorumLoss:
				f.Peer = (f.Node + 1 + rng.IntN(2)) % 3
				f.For = uniform(2*time.Second, 5*time.Second)
			}
			busyEtcd = at + f.For + 2*time.Second
		case scale:
			f.NP = []int{npDraw()}
		case scaleBurst:
			f.Gap = uniform(50*time.Millisecond, 400*time.Millisecond)
			for range 2 + rng.IntN(3) {
				f.NP = append(f.NP, npDraw())
			}
		}
		if ok && at+f.For+time.Duration(len(f.NP))*f.Gap < end {
			out = append(out, f)
		}
		at += uniform(1500*time.Millisecond, 5*time.Second)
	}
	return out
}
