package coordinator

import (
	"slices"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// nodeIndex is the leader's copy of a job's valid node records, kept so
// that the change a node reports costs O(1): an ack updates counters of the
// current plan's progress, and nothing is sorted or rebuilt. Only a change
// that can change a rank table (a node joins, goes, comes back under
// another lease, starts leaving) bumps version, which a decision's memo of
// the rank table is keyed by.
//
// The actor owns the index and is the only one to change it; a decision
// only reads it.
type nodeIndex struct {
	nodes map[string]membership.LiveNode
	// version counts the changes that can change a rank table.
	version uint64
	// roles counts the nodes of each role that are not leaving.
	roles map[membership.Role]int
	// cold counts the nodes whose next start would be cold
	// (membership.Node.Cold): only while there is one does the run after
	// a stop look for warm nodes to take their ranks.
	cold int

	progress progress
}

func newNodeIndex() *nodeIndex {
	return &nodeIndex{nodes: map[string]membership.LiveNode{}, roles: map[membership.Role]int{}, version: 1}
}

// indexOf builds an index of nodes, for decisions on a view made by hand.
func indexOf(nodes []membership.LiveNode) *nodeIndex {
	ix := newNodeIndex()
	for _, n := range nodes {
		ix.put(n, time.Time{})
	}
	return ix
}

// put records a node's record as it now stands; now is when the leader
// saw it, the time an ack counts from.
func (ix *nodeIndex) put(n membership.LiveNode, now time.Time) {
	old, had := ix.nodes[n.ID]
	ix.nodes[n.ID] = n
	ix.progress.change(n.ID, old, had, n, true, now)
	ix.countCold(old, had, -1)
	ix.countCold(n, true, 1)
	if !had || !sameForTables(old, n) {
		ix.version++
		if had {
			ix.countRole(old, -1)
		}
		ix.countRole(n, 1)
	}
}

// remove forgets a node whose record is gone or no longer valid.
func (ix *nodeIndex) remove(id string) {
	old, had := ix.nodes[id]
	if !had {
		return
	}
	delete(ix.nodes, id)
	ix.progress.change(id, old, true, membership.LiveNode{}, false, time.Time{})
	ix.countCold(old, true, -1)
	ix.countRole(old, -1)
	ix.version++
}

func (ix *nodeIndex) reset() {
	clear(ix.nodes)
	clear(ix.roles)
	ix.cold = 0
	ix.version++
	ix.progress.counted = false // recounted when asked, keeping lastAck
}

func (ix *nodeIndex) countCold(n membership.LiveNode, had bool, delta int) {
	if had && n.Cold {
		ix.cold += delta
	}
}

func (ix *nodeIndex) countRole(n membership.LiveNode, delta int) {
	if n.State != membership.NodeLeaving {
		ix.roles[n.Role] += delta
	}
}

// sameForTables reports whether two versions of a node's record place it
// alike in a rank table: only its acks differ. A node whose trainer is
// still starting ahead (Starting) may stand by, so that ends a sameness.
func sameForTables(a, b membership.LiveNode) bool {
	return a.JoinRevision == b.JoinRevision && a.Lease == b.Lease && a.Role == b.Role && a.Host == b.Host &&
		a.Starting == b.Starting &&
		a.NProc == b.NProc && a.MasterPort == b.MasterPort && slices.Equal(a.Ports, b.Ports) &&
		(a.State == membership.NodeLeaving) == (b.State == membership.NodeLeaving) &&
		(a.Ordinal == nil) == (b.Ordinal == nil) && (a.Ordinal == nil || *a.Ordinal == *b.Ordinal)
}

// startingAside reports whether a rank table of spec leaves a worker out
// because its trainer is still starting ahead (membership.Node.Starting):
// some are, and np's minimum is met without them (placeRanks).
func (ix *nodeIndex) startingAside(spec *membership.Spec) bool {
	starting, ready := 0, 0
	for _, n := range ix.nodes {
		if n.Role != membership.RoleWorker || n.State == membership.NodeLeaving {
			continue
		}
		if n.Starting {
			starting++
		} else {
			ready++
		}
	}
	return starting > 0 && ready >= spec.Workers().Min
}

func (ix *nodeIndex) lookup(id string) (membership.LiveNode, bool) {
	n, ok := ix.nodes[id]
	return n, ok
}

// joinOrder is the nodes in join order, sorted anew: a decision asks for
// it only when its memo of the rank table is out of date.
func (ix *nodeIndex) joinOrder() []membership.LiveNode {
	sorted := make([]membership.LiveNode, 0, len(ix.nodes))
	for _, n := range ix.nodes {
		sorted = append(sorted, n)
	}
	membership.SortByJoin(sorted)
	return sorted
}

// progressOf is the progress of plan p, the job's plan as of revision rev
// (a plan's put or its deletion), counted again from the records only when
// rev is not the revision counted so far. The
// actor asks for it before a decision; the decision reads it.
func (ix *nodeIndex) progressOf(rev int64, p *membership.Plan) *progress {
	if ix.progress.planRev != rev || !ix.progress.counted {
		// The same generation and phase read again (a watch listed anew,
		// a plan taken from a failed transaction) keeps the time of its
		// last ack: the stop timeout counts from there.
		var lastAck time.Time
		if was := ix.progress.plan; was != nil && p != nil && was.Generation == p.Generation && was.Phase == p.Phase {
			lastAck = ix.progress.lastAck
		}
		ix.progress = countProgress(p, ix.nodes)
		ix.progress.planRev, ix.progress.lastAck = rev, lastAck
	}
	return &ix.progress
}

// countProgress counts plan p's progress from the records alone.
func countProgress(p *membership.Plan, nodes map[string]membership.LiveNode) progress {
	pr := progress{plan: p, counted: true}
	if p != nil {
		pr.recount(nodes)
	}
	return pr
}

// progress counts how far the members of one plan are, from their records.
type progress struct {
	plan    *membership.Plan
	planRev int64
	counted bool
	// present members are alive under the lease the plan names; acked of
	// them stopped for the plan's generation (phase stop).
	present, acked int
	// In the plan's generation: running or succeeded, succeeded workers,
	// and whether the rank-0 worker succeeded.
	ready, workersDone, rank0Done int
	// workers counts the plan's worker members.
	workers int
	// failed members reported a failure in the plan's generation; lost
	// ones are gone, back under another lease, or leaving.
	failed, lost map[string]bool
	// hung members, running, reported a rank of the plan's generation hung.
	hung map[string]bool
	// lastAck is when acked or ready last grew, on the leader's clock.
	lastAck time.Time
}

// share is what one member adds to its plan's progress.
type share struct {
	present, acked, ready, done, rank0, failed, lost, hung bool
}

func (pr *progress) shareOf(id string, n membership.LiveNode, alive bool) (membership.Member, share, bool) {
	m, ok := pr.plan.Member(id)
	if !ok {
		return m, share{}, false
	}
	same := alive && int64(n.Lease) == m.Lease
	current := alive && n.Generation == pr.plan.Generation
	s := share{
		present: same,
		acked:   same && n.State == membership.NodeStopped && n.Generation >= pr.plan.Generation,
		ready:   current && (n.State == membership.NodeRunning || n.State == membership.NodeSucceeded),
		done:    current && n.State == membership.NodeSucceeded && m.Role == membership.RoleWorker,
		failed:  current && n.State == membership.NodeFailed,
		lost:    !same || n.State == membership.NodeLeaving,
		hung:    current && n.State == membership.NodeRunning && n.Hang != nil && n.Hang.Generation == pr.plan.Generation,
	}
	s.rank0 = s.done && m.Rank == 0
	return m, s, true
}

func (pr *progress) recount(nodes map[string]membership.LiveNode) {
	pr.failed, pr.lost, pr.hung = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, m := range pr.plan.Members {
		if m.Role == membership.RoleWorker {
			pr.workers++
		}
		n, alive := nodes[m.Node]
		_, s, _ := pr.shareOf(m.Node, n, alive)
		pr.apply(m.Node, s, 1)
	}
}

func (pr *progress) apply(id string, s share, sign int) {
	count := func(c *int, b bool) {
		if b {
			*c += sign
		}
	}
	count(&pr.present, s.present)
	count(&pr.acked, s.acked)
	count(&pr.ready, s.ready)
	count(&pr.workersDone, s.done)
	count(&pr.rank0Done, s.rank0)
	set := func(m map[string]bool, b bool) {
		if b && sign > 0 {
			m[id] = true
		} else if b {
			delete(m, id)
		}
	}
	set(pr.failed, s.failed)
	set(pr.lost, s.lost)
	set(pr.hung, s.hung)
}

// change moves a node's share from its old record (hadOld false: it had
// none) to its new one (hasNew false: it has none now).
func (pr *progress) change(id string, old membership.LiveNode, hadOld bool, n membership.LiveNode, hasNew bool, now time.Time) {
	if pr.plan == nil || !pr.counted {
		return
	}
	_, before, ok := pr.shareOf(id, old, hadOld)
	if !ok {
		return // not a member
	}
	_, after, _ := pr.shareOf(id, n, hasNew)
	acked, ready := pr.acked, pr.ready
	pr.apply(id, before, -1)
	pr.apply(id, after, 1)
	if pr.acked > acked || pr.ready > ready {
		pr.lastAck = now
	}
}
