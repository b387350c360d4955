package coordinator

import (
	"sync"
	"time"
)

// goneLeases remembers, by job and evicted lease, when this process revoked
// it or first found it gone from etcd. It belongs to the process, not to a term
// or a job's actor: what it measured on this clock stays true when the lead
// is lost and won again or a watch is reset, which both start new actors. A
// new actor that had to ask again would find the lease gone only then, and
// wait a whole TTL more than the evicted node needs; through a quorum loss,
// which renews every lease in etcd, that is longer than the eviction record
// itself lives.
type goneLeases struct {
	mu sync.Mutex
	at map[goneLease]time.Time
}

type goneLease struct {
	job   string
	lease int64
}

func newGoneLeases() *goneLeases { return &goneLeases{at: map[goneLease]time.Time{}} }

func (g *goneLeases) get(job string, lease int64) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.at[goneLease{job, lease}]
	return at, ok
}

// set notes that the lease was gone at at; the earliest sight stands (a
// revocation that returns late, after the node itself revoked the lease,
// must not push the wait back).
func (g *goneLeases) set(job string, lease int64, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := goneLease{job, lease}
	if was, ok := g.at[k]; !ok || at.Before(was) {
		g.at[k] = at
	}
}

// keep forgets the job's leases that are not in live: their eviction
// records are gone.
func (g *goneLeases) keep(job string, live map[int64]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k := range g.at {
		if k.job == job && !live[k.lease] {
			delete(g.at, k)
		}
	}
}
