package membership

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TableChunkBytes is the most a stored table chunk holds: with the plan
// record, status and events of the same transaction it stays within
// etcd's default request limit of 1.5 MiB.
const TableChunkBytes = 1 << 20

// MaxDeltaBytes bounds the delta a plan record carries (base64 in JSON):
// beyond it, nodes read the snapshot.
const MaxDeltaBytes = 64 << 10

// MaxTableChunks bounds a stored table (64 MiB compressed, some millions
// of members): a job whose table would not fit fails with that message.
const MaxTableChunks = 64

// TableRef is how a plan record names its rank table: stored in Chunks
// chunks at Keys.TableGeneration(job, Generation), Bytes long in all.
type TableRef struct {
	Generation int64  `json:"generation"`
	Digest     string `json:"digest"`
	Members    int    `json:"members"`
	Chunks     int    `json:"chunks"`
	Bytes      int    `json:"bytes"`
}

// TableDeltaRef is the change from the table of digest Base to the plan's:
// a node that holds Base applies Ops instead of reading the snapshot.
type TableDeltaRef struct {
	Base string `json:"base"`
	Ops  []byte `json:"ops"`
}

var digestPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Validate reports the first field of r that is out of range for a plan of
// generation gen.
func (r TableRef) Validate(gen int64) error {
	switch {
	case r.Generation < 1 || r.Generation > gen:
		return fmt.Errorf("table generation %d: want 1..%d", r.Generation, gen)
	case !digestPattern.MatchString(r.Digest):
		return fmt.Errorf("table digest %q", r.Digest)
	case r.Members < 0 || r.Members > MaxTableMembers:
		return fmt.Errorf("table of %d members", r.Members)
	case r.Chunks < 1 || r.Chunks > MaxTableChunks || r.Bytes < 1 || r.Bytes > r.Chunks*TableChunkBytes:
		return fmt.Errorf("table of %d bytes in %d chunks", r.Bytes, r.Chunks)
	}
	return nil
}

// SplitTableSnapshot cuts a snapshot into the chunks it is stored in, of
// at most chunkBytes each (TableChunkBytes if 0).
func SplitTableSnapshot(snapshot []byte, chunkBytes int) [][]byte {
	if chunkBytes <= 0 || chunkBytes > TableChunkBytes {
		chunkBytes = TableChunkBytes
	}
	var chunks [][]byte
	for len(snapshot) > chunkBytes {
		chunks = append(chunks, snapshot[:chunkBytes])
		snapshot = snapshot[chunkBytes:]
	}
	return append(chunks, snapshot)
}

// TableCache keeps the last tables a process decoded, by digest, so that
// every agent of a process (the simulated nodes of a benchmark) decodes a
// table once, and a restart with the same members decodes nothing. It is
// safe for concurrent use; the zero value is ready.
type TableCache struct {
	mu     sync.Mutex
	recent []*Table // most recent last
}

// tableCacheSize is enough for the current table, the previous one and a
// few a slow reader may still ask for.
const tableCacheSize = 4

// Get returns the table of digest, if cached.
func (c *TableCache) Get(digest string) *Table {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.recent) - 1; i >= 0; i-- {
		if t := c.recent[i]; t.Digest == digest {
			return t
		}
	}
	return nil
}

// Put remembers t.
func (c *TableCache) Put(t *Table) {
	if c == nil || t == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.recent {
		if x.Digest == t.Digest {
			return
		}
	}
	c.recent = append(c.recent, t)
	if len(c.recent) > tableCacheSize {
		c.recent = c.recent[1:]
	}
}

// TableSource finds the table a plan record names.
type TableSource struct {
	// Cache, if set, is consulted and filled.
	Cache *TableCache
	// Fetch reads the stored snapshot, when nothing else has the table.
	Fetch func(TableRef) ([]byte, error)
}

// Resolve returns the table that ref names: have itself when it is that
// table, a cached one, have with the delta applied, or the stored snapshot.
func (s TableSource) Resolve(ref TableRef, delta *TableDeltaRef, have *Table) (*Table, error) {
	if have != nil && have.Digest == ref.Digest {
		return have, nil
	}
	if t := s.Cache.Get(ref.Digest); t != nil {
		return t, nil
	}
	if delta != nil && have != nil && delta.Base == have.Digest {
		t, err := ApplyTableDelta(have, delta.Ops, ref.Digest)
		if err == nil {
			s.Cache.Put(t)
			return t, nil
		}
		// A delta that does not apply is a bug or a forged record; the
		// snapshot still tells the truth.
	}
	if s.Fetch == nil {
		return nil, ErrTableMissing
	}
	snapshot, err := s.Fetch(ref)
	if err != nil {
		return nil, err
	}
	t, err := DecodeTableSnapshot(snapshot, ref.Digest)
	if err != nil {
		return nil, err
	}
	s.Cache.Put(t)
	return t, nil
}

// ReadTableSnapshot reads the snapshot ref names from etcd, at revision rev
// if it is not 0 (the plan's own, so that a table replaced since is not
// mistaken for it) or, when that is compacted, at the latest.
func ReadTableSnapshot(ctx context.Context, cli *clientv3.Client, keys Keys, job string, ref TableRef, rev int64) ([]byte, error) {
	prefix := keys.TableGeneration(job, ref.Generation)
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := cli.Get(ctx, prefix, opts...)
	if rev > 0 && errors.Is(err, rpctypes.ErrCompacted) {
		resp, err = cli.Get(ctx, prefix, clientv3.WithPrefix())
	}
	if err != nil {
		return nil, fmt.Errorf("read rank table: %w", err)
	}
	chunks := map[int][]byte{}
	for _, kv := range resp.Kvs {
		if jk, ok := keys.ParseJobKey(string(kv.Key)); ok && jk.Kind == KindTable {
			chunks[jk.Chunk] = kv.Value
		}
	}
	return assembleTable(ref, chunks)
}

// assembleTable joins the chunks of ref's snapshot.
func assembleTable(ref TableRef, chunks map[int][]byte) ([]byte, error) {
	out := make([]byte, 0, ref.Bytes)
	for i := range ref.Chunks {
		c, ok := chunks[i]
		if !ok {
			return nil, fmt.Errorf("%w: generation %d lacks chunk %d of %d", ErrTableMissing, ref.Generation, i, ref.Chunks)
		}
		out = append(out, c...)
	}
	if len(out) != ref.Bytes {
		return nil, fmt.Errorf("%w: generation %d has %d bytes, the plan names %d", ErrTableMissing, ref.Generation, len(out), ref.Bytes)
	}
	return out, nil
}

// StoredTables are the table chunks a follower of a job's keys has seen,
// so that it can resolve the plan without reading etcd again.
type StoredTables struct {
	chunks map[int64]map[int][]byte
}

// Apply records a change of a KindTable key.
func (s *StoredTables) Apply(jk JobKey, kv KeyValue) {
	if s.chunks == nil {
		s.chunks = map[int64]map[int][]byte{}
	}
	gen := s.chunks[jk.Generation]
	if kv.Deleted {
		delete(gen, jk.Chunk)
		if len(gen) == 0 {
			delete(s.chunks, jk.Generation)
		}
		return
	}
	if gen == nil {
		gen = map[int][]byte{}
		s.chunks[jk.Generation] = gen
	}
	gen[jk.Chunk] = kv.Value
}

// Chunk returns a stored chunk of generation gen.
func (s *StoredTables) Chunk(gen int64, i int) ([]byte, bool) {
	c, ok := s.chunks[gen][i]
	return c, ok
}

// Reset forgets every chunk, before a fresh listing.
func (s *StoredTables) Reset() { clear(s.chunks) }

// Snapshot returns the stored snapshot ref names.
func (s *StoredTables) Snapshot(ref TableRef) ([]byte, error) {
	return assembleTable(ref, s.chunks[ref.Generation])
}

// ErrTableTooLarge is returned for a rank table beyond MaxTableChunks.
var ErrTableTooLarge = errors.New("membership: rank table too large to store")

// StoredPlan is a plan as the coordinator writes it: the record for
// Keys.Plan, which names the table, and the table's chunks when they are
// not stored yet.
type StoredPlan struct {
	// Plan is the plan with Table (and Delta) set and the table attached.
	Plan Plan
	// Record is Plan without its members, for Keys.Plan.
	Record string
	// Chunks go to Keys.TableChunk(job, Plan.Table.Generation, i).
	Chunks [][]byte
}

// StorePlan prepares p for storage. current is the table of the plan it
// follows (nil for none), stored under currentRef: a table with the same
// members is not stored again, and a new one carries a delta against it.
// A plan that already names a table (a stop phase names the previous
// run's) keeps it. Chunks hold at most chunkBytes (TableChunkBytes if 0).
func StorePlan(p Plan, current *Table, currentRef *TableRef, chunkBytes int) (StoredPlan, error) {
	switch {
	case p.Table != nil:
		if p.table == nil && current != nil && current.Digest == p.Table.Digest {
			p.AttachTable(current)
		}
	case len(p.Members) > 0:
		t, err := NewTable(p.Members)
		if err != nil {
			return StoredPlan{}, err
		}
		var chunks [][]byte
		if current != nil && currentRef != nil && current.Digest == t.Digest {
			ref := *currentRef
			p.Table, t = &ref, current
		} else {
			snapshot := t.TableSnapshot()
			chunks = SplitTableSnapshot(snapshot, chunkBytes)
			if len(chunks) > MaxTableChunks {
				return StoredPlan{}, fmt.Errorf("%w: its %d members take %d KiB compressed, more than the %d chunks of %d KiB a plan may name",
					ErrTableTooLarge, len(t.Members), len(snapshot)>>10, MaxTableChunks, len(chunks[0])>>10)
			}
			p.Table = &TableRef{Generation: p.Generation, Digest: t.Digest, Members: len(t.Members), Chunks: len(chunks), Bytes: len(snapshot)}
			if current != nil {
				// A delta is worth it while it is much smaller than the
				// snapshot, and it must keep the record small: the plan
				// is what every node watches.
				if ops, ok := t.TableDelta(current); ok && len(ops) <= len(snapshot)/2 && len(ops) <= MaxDeltaBytes {
					p.Delta = &TableDeltaRef{Base: current.Digest, Ops: ops}
				}
			}
		}
		p.AttachTable(t)
		rec := p
		rec.Members, rec.table = nil, nil
		val, err := Encode(rec)
		return StoredPlan{Plan: p, Record: val, Chunks: chunks}, err
	}
	rec := p
	rec.Members, rec.table = nil, nil
	if p.Table == nil {
		rec.Members = p.Members // no table: nothing to name
	}
	val, err := Encode(rec)
	return StoredPlan{Plan: p, Record: val}, err
}

// ResolvePlan attaches the table that p, read at revision rev, names.
func ResolvePlan(ctx context.Context, cli *clientv3.Client, keys Keys, job string, p *Plan, rev int64, cache *TableCache) error {
	if !p.Unresolved() {
		return nil
	}
	t, err := TableSource{Cache: cache, Fetch: func(ref TableRef) ([]byte, error) {
		return ReadTableSnapshot(ctx, cli, keys, job, ref, rev)
	}}.Resolve(*p.Table, nil, nil)
	if err != nil {
		return err
	}
	p.AttachTable(t)
	return nil
}
