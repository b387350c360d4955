package controller

import (
	"context"
	"slices"
	"sync"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// Records are the jobs' records in etcd that a controller reads, by job,
// as Term.Follow keeps them for the term.
type Records struct {
	// Kinds are the records kept; changes of other keys are passed over.
	Kinds []membership.KeyKind
	// Drop, if set, tells which of a job's records to forget after a
	// change: the autoscaler forgets a job with neither spec nor status.
	Drop func(*membership.JobRecords) bool

	mu   sync.Mutex
	jobs map[string]*membership.JobRecords
}

// Get returns a copy of a job's records; false if it has none.
func (r *Records) Get(job string) (membership.JobRecords, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[job]
	if !ok {
		return membership.JobRecords{}, false
	}
	return *j, true
}

// Each calls f with every job's records, under the records' lock: f must
// neither block nor keep them.
func (r *Records) Each(f func(job string, rec *membership.JobRecords)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for job, rec := range r.jobs {
		f(job, rec)
	}
}

// Update is what one update from etcd did to the records.
type Update struct {
	// Reset says that the follower listed the jobs afresh (a compacted or
	// broken watch): every job held before was dropped, and is in Changes
	// as Dropped before the listing's changes.
	Reset   bool
	Changes []Change
}

// Change is what one change did to a job's records. A job's spec names the
// resource it is run for (its owner): Before and After are the spec before
// the change and after it.
type Change struct {
	Job           string
	Before, After *membership.Spec
	// Dropped says that a reset dropped the job's records; After is nil.
	Dropped bool
}

// Follow keeps r current in a goroutine of the term until ctx ends, and
// hands changed every update that changed it, outside r's lock.
func (t *Term) Follow(ctx context.Context, r *Records, changed func(Update)) {
	keys := t.clients.Keys
	t.Go(func() {
		_ = presence.Follow(ctx, t.clients.Etcd, presence.Range{Key: keys.Jobs(), Prefix: true}, t.clients.Logger,
			func(u presence.Update) error {
				changed(r.apply(keys, u))
				return nil
			})
	})
}

// apply takes in one update from etcd.
func (r *Records) apply(keys membership.Keys, u presence.Update) Update {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs == nil {
		r.jobs = map[string]*membership.JobRecords{}
	}
	out := Update{Reset: u.Reset}
	if u.Reset {
		for job, rec := range r.jobs {
			out.Changes = append(out.Changes, Change{Job: job, Before: rec.Spec, Dropped: true})
		}
		clear(r.jobs)
	}
	for _, kv := range u.Changes {
		jk, ok := keys.ParseJobKey(kv.Key)
		if !ok || !slices.Contains(r.Kinds, jk.Kind) {
			continue
		}
		rec := r.jobs[jk.Job]
		if rec == nil {
			rec = &membership.JobRecords{}
			r.jobs[jk.Job] = rec
		}
		c := Change{Job: jk.Job, Before: rec.Spec}
		rec.Apply(jk, kv)
		c.After = rec.Spec
		if r.Drop != nil && r.Drop(rec) {
			delete(r.jobs, jk.Job)
		}
		out.Changes = append(out.Changes, c)
	}
	return out
}
