package coordinator

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/membership"
)

// table is a computed rank table: the members of a generation.
type table struct {
	members   []membership.Member // workers by rank, then ps, then scheduler
	workers   int
	worldSize int
	master    string
	gloo      string // the first parameter server's master port: PaddlePaddle's gloo store
}

// shortage says why no table can be formed.
type shortage struct {
	role      membership.Role
	have      int
	need      int
	available int // live nodes of the role, for status
}

func (s shortage) String() string {
	return fmt.Sprintf("waiting for nodes: %d of %s", s.have, english.Count(s.need, string(s.role)+" node"))
}

// assignRanks computes the rank table for spec from the live nodes (in join
// order) and the previous table. It is deterministic: the same input gives
// the same table on every replica.
//
// Survivors of the previous table keep their rank while it is below the new
// size. A survivor is a member still under the lease the table names: a
// node that came back under another lease (restarted, or fenced) is a
// newcomer. The holes left are filled, lowest rank first, by survivors whose
// rank no longer fits (lowest old rank first), then by newcomers in join
// order. Nodes in excluded come last, so that they run only when no other
// node can take their place. Live nodes beyond the table are on standby:
// the job's spares. As they joined before a node that comes back, a lost
// member's rank goes to the spare that waited longest, and the returning
// node becomes a spare.
func assignRanks(spec membership.Spec, live []membership.LiveNode, prev []membership.Member, excluded map[string]bool) (table, *shortage) {
	return placeRanks(spec, live, prev, excluded, false)
}

// assignWarmRanks is assignRanks for the generation that starts after a
// stop, told which nodes' next start would be cold (membership.Node.Cold):
// a cold member's rank goes to a warm standby node, and the member stands
// by, so that the generation does not wait for its imports. Ranks move only
// when that makes every rank start warm: when each cold member of the
// table can be given a warm standby node of its role (not excluded), in
// order of preference, lowest rank first. Otherwise the generation waits
// for a cold start anyway, and the table is assignRanks'. A standby node
// that is still cold takes a hole only after the warm ones. A first
// generation is assignRanks': every node is new, and a StatefulSet's pods
// are ranked by ordinal.
func assignWarmRanks(spec membership.Spec, live []membership.LiveNode, prev []membership.Member, excluded map[string]bool) (table, *shortage) {
	return placeRanks(spec, live, prev, excluded, true)
}

// placeRanks is assignRanks, or with warm assignWarmRanks.
func placeRanks(spec membership.Spec, live []membership.LiveNode, prev []membership.Member, excluded map[string]bool, warm bool) (table, *shortage) {
	byRole := map[membership.Role][]membership.LiveNode{}
	for _, n := range live {
		if n.State == membership.NodeLeaving {
			continue // on its way out: it runs no new generation
		}
		byRole[n.Role] = append(byRole[n.Role], n)
	}
	type place struct {
		rank  int
		lease int64
	}
	prevPlace := map[string]place{}
	for _, m := range prev {
		prevPlace[string(m.Role)+"/"+m.Node] = place{m.Rank, m.Lease}
	}

	if short := shortOf(spec, func(r membership.Role) int { return len(byRole[r]) }); short != nil {
		return table{}, short
	}
	workers := byRole[membership.RoleWorker]
	if ready := slices.DeleteFunc(slices.Clone(workers), func(n membership.LiveNode) bool { return n.Starting }); len(ready) < len(workers) && len(ready) >= spec.Workers().Min {
		// A node whose trainer is still starting ahead (--in-place) stands
		// by while np's minimum is met without it: the job trains on, and
		// grows once it is ready, which it writes.
		workers = ready
		byRole[membership.RoleWorker] = ready
	}

	var t table
	t.workers = min(len(workers), spec.Workers().Max)
	for _, rc := range []struct {
		role membership.Role
		n    int
	}{
		{membership.RoleWorker, t.workers},
		{membership.RolePS, spec.PS},
		{membership.RoleScheduler, spec.Schedulers},
		{membership.RoleHeter, spec.Heter},
	} {
		ranked := rankRole(byRole[rc.role], rc.n, func(n membership.LiveNode) (int, bool) {
			p, ok := prevPlace[string(rc.role)+"/"+n.ID]
			return p.rank, ok && p.lease == int64(n.Lease)
		}, len(prev) == 0, excluded, warm && len(prev) > 0)
		global := 0
		for rank, n := range ranked {
			t.members = append(t.members, membership.Member{
				Node: n.ID, Role: rc.role, Rank: rank, GlobalRank: global,
				Host: n.Host, Ports: append([]int(nil), n.Ports...), NProc: n.NProc, Lease: int64(n.Lease),
			})
			global += n.NProc
		}
		if rc.role == membership.RolePS && len(ranked) > 0 {
			t.gloo = net.JoinHostPort(ranked[0].Host, strconv.Itoa(ranked[0].MasterPort))
		}
		if rc.role == membership.RoleWorker {
			t.worldSize = global
			if len(ranked) > 0 {
				t.master = net.JoinHostPort(ranked[0].Host, strconv.Itoa(ranked[0].MasterPort))
			}
		}
	}
	return t, nil
}

// shortOf says which role has fewer nodes than spec needs, given how many
// nodes of each role are not leaving.
func shortOf(spec membership.Spec, count func(membership.Role) int) *shortage {
	for _, rc := range []struct {
		role membership.Role
		need int
	}{
		{membership.RoleWorker, spec.Workers().Min},
		{membership.RolePS, spec.PS},
		{membership.RoleScheduler, spec.Schedulers},
		{membership.RoleHeter, spec.Heter},
	} {
		if have := count(rc.role); have < rc.need {
			return &shortage{role: rc.role, have: have, need: rc.need, available: have}
		}
	}
	return nil
}

// rankRole picks n of the candidates (in join order) and returns them indexed
// by rank.
//
// The nodes kept are, in this order of preference: survivors, newcomers in
// join order (by ordinal in a first generation, first), then excluded
// survivors and excluded newcomers. When not every
// survivor fits, those of the lowest ordinals are kept if every survivor has
// one (a StatefulSet that shrinks removes its highest ordinals, so the
// table keeps the pods it keeps and a scale-down restarts once), else those
// of the lowest old ranks. Kept survivors keep their rank while it fits;
// the holes are filled lowest first by the other kept nodes in the same
// order. With warm, the cold newcomers follow the warm ones, and the
// cold nodes ranked give their places to warm nodes left standing by, if
// there is one for each (warmSwap).
func rankRole(candidates []membership.LiveNode, n int, prevRank func(membership.LiveNode) (int, bool), first bool, excluded map[string]bool, warm bool) []membership.LiveNode {
	type withRank struct {
		node membership.LiveNode
		rank int
	}
	var survivors, excludedTail []withRank
	var newcomers, excludedNewcomers []membership.LiveNode
	for _, c := range candidates {
		r, survivor := prevRank(c)
		switch {
		case survivor && excluded[c.ID]:
			excludedTail = append(excludedTail, withRank{c, r})
		case excluded[c.ID]:
			excludedNewcomers = append(excludedNewcomers, c)
		case survivor:
			survivors = append(survivors, withRank{c, r})
		default:
			newcomers = append(newcomers, c)
		}
	}
	byOldRank := func(s []withRank) {
		sort.Slice(s, func(i, j int) bool { return s[i].rank < s[j].rank })
	}
	byOldRank(survivors)
	byOldRank(excludedTail)
	// Pods of a StatefulSet come in by ordinal: worker-0 is rank 0 of a
	// first generation (as the operators number their pods, and MSJob's
	// success policy names worker 0). Later, join order: a spare that has
	// waited goes before a node that just came back, whatever their
	// ordinals.
	if first && allHaveOrdinals(newcomers, func(n membership.LiveNode) membership.LiveNode { return n }) {
		sort.SliceStable(newcomers, func(i, j int) bool { return *newcomers[i].Ordinal < *newcomers[j].Ordinal })
	}
	if warm {
		slices.SortStableFunc(newcomers, func(a, b membership.LiveNode) int { return boolOrder(a.Cold, b.Cold) })
	}
	if len(survivors) > n && allHaveOrdinals(survivors, func(w withRank) membership.LiveNode { return w.node }) {
		sort.SliceStable(survivors, func(i, j int) bool { return *survivors[i].node.Ordinal < *survivors[j].node.Ordinal })
		survivors = survivors[:n]
		byOldRank(survivors)
	}

	ranked := make([]membership.LiveNode, n)
	taken := make([]bool, n)
	var fill []membership.LiveNode
	for _, s := range survivors {
		if s.rank < n && !taken[s.rank] {
			ranked[s.rank], taken[s.rank] = s.node, true
		} else {
			fill = append(fill, s.node)
		}
	}
	fill = append(fill, newcomers...)
	for _, s := range excludedTail {
		fill = append(fill, s.node)
	}
	fill = append(fill, excludedNewcomers...)
	next := 0
	for r := 0; r < n && next < len(fill); r++ {
		if !taken[r] {
			ranked[r], taken[r] = fill[next], true
			next++
		}
	}
	if warm {
		warmSwap(ranked, fill[next:], excluded)
	}
	return ranked
}

// warmSwap gives the place of each cold node of ranked to a warm node of
// standby (the nodes left out, in order of preference) that is not
// excluded, lowest rank first, if there is one for each; else it changes
// nothing: a generation that waits for one cold start gains nothing from
// moving the others.
func warmSwap(ranked, standby []membership.LiveNode, excluded map[string]bool) {
	var cold []int
	for r, n := range ranked {
		if n.Cold {
			cold = append(cold, r)
		}
	}
	if len(cold) == 0 {
		return
	}
	var warm []membership.LiveNode
	for _, n := range standby {
		if !n.Cold && !excluded[n.ID] {
			warm = append(warm, n)
		}
	}
	if len(warm) < len(cold) {
		return
	}
	for i, r := range cold {
		ranked[r] = warm[i]
	}
}

// boolOrder orders false before true.
func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func allHaveOrdinals[T any](s []T, node func(T) membership.LiveNode) bool {
	for _, x := range s {
		if node(x).Ordinal == nil {
			return false
		}
	}
	return true
}

// sameTable reports whether two tables put the same node incarnations in the
// same places.
func sameTable(a, b []membership.Member) bool {
	if len(a) != len(b) {
		return false
	}
	type slot struct {
		role membership.Role
		rank int
	}
	at := make(map[slot]membership.Member, len(a))
	for _, m := range a {
		at[slot{m.Role, m.Rank}] = m
	}
	for _, m := range b {
		o, ok := at[slot{m.Role, m.Rank}]
		if !ok || o.Node != m.Node || o.Lease != m.Lease || o.NProc != m.NProc {
			return false
		}
	}
	return true
}

// ranksFor is assignRanks on v's nodes, and whether its table is the
// plan's, taken from m while the nodes' version, the spec's and the plan's
// revisions and the excluded nodes are those it was computed from, and
// stored in m otherwise. Too few nodes is known from the counts alone.
func ranksFor(v view, m *memo, excluded map[string]bool) (table, *shortage, bool) {
	ix := v.index()
	if short := shortOf(*v.spec, func(r membership.Role) int { return ix.roles[r] }); short != nil {
		return table{}, short, false
	}
	key := ranksKey{version: ix.version, specRev: v.specRev, planRev: v.planRev, excluded: excludedKey(excluded)}
	memoized := v.specRev != 0 // a view made by hand has no revisions
	if memoized && m.ranks.valid && m.ranks.key == key {
		return m.ranks.table, m.ranks.short, m.ranks.same
	}
	var prev []membership.Member
	if v.plan != nil {
		prev = v.plan.Members
	}
	t, short := assignRanks(*v.spec, ix.joinOrder(), prev, excluded)
	same := short == nil && v.plan != nil && sameTable(t.members, v.plan.Members)
	if memoized {
		m.ranks = ranksMemo{valid: true, key: key, table: t, short: short, same: same}
	}
	return t, short, same
}

// ranksKey is what a rank table is computed from: the nodes, by the
// index's version, the spec and the plan, by revision, and the nodes
// excluded.
type ranksKey struct {
	version          uint64
	specRev, planRev int64
	excluded         string
}

type ranksMemo struct {
	valid bool
	key   ranksKey
	table table
	short *shortage
	same  bool
}

func excludedKey(excluded map[string]bool) string {
	ids := make([]string, 0, len(excluded))
	for id, ok := range excluded {
		if ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return strings.Join(ids, "\x00")
}
