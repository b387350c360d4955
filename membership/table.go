package membership

import (
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Table is the rank table of a generation: its members, workers by rank,
// then parameter servers, schedulers and heterogeneous trainers, each role
// by rank. A Table is immutable once built, so that the agents of one
// process, and the plans that refer to it, share one copy.
//
// On the wire a table is a snapshot (TableSnapshot, a compressed column
// layout stored in chunks at Keys.TableChunk) or a delta against the table
// before it (TableDelta, carried in the plan record). Traffic per
// generation is then one small record per watcher plus one snapshot per
// node that has no table to apply the delta to.
type Table struct {
	// Digest names the table's content (not its generation): a restart
	// with the same members has the same digest, and a node that holds
	// the table needs nothing more.
	Digest  string
	Members []Member

	indexOnce sync.Once
	index     map[string]int
}

// NewTable builds a table from members in the order described on Table.
// Rank and GlobalRank are recomputed from that order.
func NewTable(members []Member) (*Table, error) {
	ms := append([]Member(nil), members...)
	if err := rerank(ms); err != nil {
		return nil, err
	}
	t := &Table{Members: ms}
	t.Digest = digest(encodeTable(ms))
	return t, nil
}

// Member returns the entry of node.
func (t *Table) Member(node string) (Member, bool) {
	if t == nil {
		return Member{}, false
	}
	t.indexOnce.Do(func() {
		t.index = make(map[string]int, len(t.Members))
		for i, m := range t.Members {
			t.index[m.Node] = i
		}
	})
	i, ok := t.index[node]
	if !ok {
		return Member{}, false
	}
	return t.Members[i], true
}

// roleOrder is the order of the roles in a table.
var roleOrder = []Role{RoleWorker, RolePS, RoleScheduler, RoleHeter}

func roleCode(r Role) (byte, bool) {
	for i, x := range roleOrder {
		if x == r {
			return byte(i), true
		}
	}
	return 0, false
}

// rerank sets each member's Rank and GlobalRank from its place, and checks
// that roles come in table order, that no node is listed twice and that
// each member is well formed.
func rerank(ms []Member) error {
	seen := make(map[string]bool, len(ms))
	last, rank, global := -1, 0, 0
	for i := range ms {
		m := &ms[i]
		code, ok := roleCode(m.Role)
		if !ok {
			return fmt.Errorf("table: member %s: unknown role %q", m.Node, m.Role)
		}
		if int(code) < last {
			return fmt.Errorf("table: member %s: role %s out of order", m.Node, m.Role)
		}
		if int(code) != last {
			last, rank, global = int(code), 0, 0
		}
		if err := ValidateNodeID(m.Node); err != nil {
			return fmt.Errorf("table: %w", err)
		}
		if seen[m.Node] {
			return fmt.Errorf("table: member %s listed twice", m.Node)
		}
		seen[m.Node] = true
		if m.Host == "" || len(m.Host) > 253 {
			return fmt.Errorf("table: member %s: host %q", m.Node, m.Host)
		}
		if m.NProc < 1 || m.NProc > MaxNProc || len(m.Ports) != m.NProc {
			return fmt.Errorf("table: member %s: %d ports for %d processes", m.Node, len(m.Ports), m.NProc)
		}
		for _, p := range m.Ports {
			if p < 1 || p > 65535 {
				return fmt.Errorf("table: member %s: port %d out of range", m.Node, p)
			}
		}
		m.Rank, m.GlobalRank = rank, global
		rank++
		global += m.NProc
	}
	return nil
}

// tableMagic starts a table's canonical encoding; the digest covers it.
var tableMagic = []byte("ETT1")

// encodeTable is the canonical encoding of members, column by column so
// that similar values sit together for the compressor: roles as runs,
// node ids and hosts front-coded against the previous one, ports as
// differences from the port before plus one, leases as differences.
func encodeTable(ms []Member) []byte {
	var b []byte
	b = append(b, tableMagic...)
	b = binary.AppendUvarint(b, uint64(len(ms)))
	// Roles, as runs.
	for i := 0; i < len(ms); {
		j := i
		for j < len(ms) && ms[j].Role == ms[i].Role {
			j++
		}
		code, _ := roleCode(ms[i].Role)
		b = append(b, code)
		b = binary.AppendUvarint(b, uint64(j-i))
		i = j
	}
	b = appendFrontCoded(b, ms, func(m Member) string { return m.Node })
	b = appendFrontCoded(b, ms, func(m Member) string { return m.Host })
	for _, m := range ms {
		b = binary.AppendUvarint(b, uint64(m.NProc))
	}
	for _, m := range ms {
		b = appendPorts(b, m.Ports)
	}
	prev := int64(0)
	for _, m := range ms {
		b = binary.AppendVarint(b, m.Lease-prev)
		prev = m.Lease
	}
	return b
}

func appendFrontCoded(b []byte, ms []Member, field func(Member) string) []byte {
	prev := ""
	for _, m := range ms {
		s := field(m)
		n := 0
		for n < len(s) && n < len(prev) && s[n] == prev[n] {
			n++
		}
		b = binary.AppendUvarint(b, uint64(n))
		b = binary.AppendUvarint(b, uint64(len(s)-n))
		b = append(b, s[n:]...)
		prev = s
	}
	return b
}

func appendPorts(b []byte, ports []int) []byte {
	prev := 0
	for i, p := range ports {
		if i == 0 {
			b = binary.AppendUvarint(b, uint64(p))
		} else {
			b = binary.AppendVarint(b, int64(p-prev-1))
		}
		prev = p
	}
	return b
}

func digest(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:16])
}

// errTable wraps every decoding failure of a table or a delta.
func errTable(format string, args ...any) error {
	return fmt.Errorf("%w: table: %s", ErrInvalidRecord, fmt.Sprintf(format, args...))
}

// reader reads the canonical encoding, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errTable("truncated")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errTable("truncated")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errTable("truncated")
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

// count reads a count that each item needs at least min bytes for, so
// that a forged count cannot make the decoder allocate beyond the input.
func (r *reader) count(limit int, min int) int {
	n := r.uvarint()
	if r.err == nil && (n > uint64(limit) || n*uint64(min) > uint64(len(r.b))) {
		r.err = errTable("count %d beyond the data", n)
		return 0
	}
	return int(n)
}

// MaxTableMembers bounds a table's size: a job's nodes are counted in tens
// of thousands.
const MaxTableMembers = 1 << 20

func decodeCanonical(b []byte) ([]Member, error) {
	if !bytes.HasPrefix(b, tableMagic) {
		return nil, errTable("not a table")
	}
	r := &reader{b: b[len(tableMagic):]}
	n := r.count(MaxTableMembers, 1)
	ms := make([]Member, n)
	for i := 0; i < n && r.err == nil; {
		code := r.bytes(1)
		run := r.uvarint()
		if r.err != nil {
			break
		}
		if int(code[0]) >= len(roleOrder) || run == 0 || run > uint64(n-i) {
			return nil, errTable("bad role run")
		}
		for k := 0; k < int(run); k++ {
			ms[i+k].Role = roleOrder[code[0]]
		}
		i += int(run)
	}
	readFrontCoded(r, ms, func(m *Member, s string) { m.Node = s })
	readFrontCoded(r, ms, func(m *Member, s string) { m.Host = s })
	for i := range ms {
		ms[i].NProc = int(min(r.uvarint(), MaxNProc+1))
	}
	for i := range ms {
		ms[i].Ports = readPorts(r, ms[i].NProc)
	}
	prev := int64(0)
	for i := range ms {
		prev += r.varint()
		ms[i].Lease = prev
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, errTable("%d bytes after the members", len(r.b))
	}
	if err := rerank(ms); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	return ms, nil
}

func readFrontCoded(r *reader, ms []Member, set func(*Member, string)) {
	prev := ""
	for i := range ms {
		shared, rest := r.uvarint(), r.uvarint()
		if r.err != nil {
			return
		}
		if shared > uint64(len(prev)) || shared+rest > MaxNodeIDLength {
			r.err = errTable("bad string")
			return
		}
		s := prev[:shared] + string(r.bytes(rest))
		set(&ms[i], s)
		prev = s
	}
}

func readPorts(r *reader, nproc int) []int {
	if nproc < 1 || nproc > MaxNProc {
		r.err = errTable("nproc %d", nproc)
		return nil
	}
	ports := make([]int, nproc)
	for i := range ports {
		if i == 0 {
			ports[i] = int(min(r.uvarint(), 1<<20))
		} else {
			ports[i] = ports[i-1] + 1 + int(max(min(r.varint(), 1<<20), -(1<<20)))
		}
	}
	return ports
}

// deflaters are reused: a flate writer allocates about a megabyte, far
// more than a small job's table.
var deflaters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.BestSpeed)
	return w
}}

// TableSnapshot is the compressed canonical encoding of t, as stored.
func (t *Table) TableSnapshot() []byte {
	var buf bytes.Buffer
	w := deflaters.Get().(*flate.Writer)
	defer deflaters.Put(w)
	w.Reset(&buf)
	_, _ = w.Write(encodeTable(t.Members))
	_ = w.Close()
	return buf.Bytes()
}

// maxCanonical bounds what a snapshot may inflate to, so that a forged one
// cannot exhaust memory: 100,000 members of 8 processes take about 5 MiB.
const maxCanonical = 256 << 20

// DecodeTableSnapshot reads a snapshot and checks it against the digest
// that the plan names.
func DecodeTableSnapshot(snapshot []byte, wantDigest string) (*Table, error) {
	canonical, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(snapshot)), maxCanonical))
	if err != nil {
		return nil, errTable("inflate: %v", err)
	}
	if got := digest(canonical); got != wantDigest {
		return nil, errTable("digest %s, the plan names %s", got, wantDigest)
	}
	ms, err := decodeCanonical(canonical)
	if err != nil {
		return nil, err
	}
	return &Table{Digest: wantDigest, Members: ms}, nil
}

// TableDelta encodes the change from base to t: the new length and each
// place whose member changed. It reports false when a snapshot would be
// about as small.
func (t *Table) TableDelta(base *Table) ([]byte, bool) {
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(t.Members)))
	changed := 0
	for i, m := range t.Members {
		if i < len(base.Members) && sameEntry(base.Members[i], m) {
			continue
		}
		changed++
		if changed > len(t.Members)/4+1 {
			return nil, false
		}
		b = binary.AppendUvarint(b, uint64(i))
		code, _ := roleCode(m.Role)
		b = append(b, code)
		for _, s := range []string{m.Node, m.Host} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		b = binary.AppendUvarint(b, uint64(m.NProc))
		b = appendPorts(b, m.Ports)
		b = binary.AppendVarint(b, m.Lease)
	}
	return b, true
}

// sameEntry compares what a table stores of a member (ranks are derived).
func sameEntry(a, b Member) bool {
	if a.Node != b.Node || a.Role != b.Role || a.Host != b.Host || a.Lease != b.Lease || a.NProc != b.NProc || len(a.Ports) != len(b.Ports) {
		return false
	}
	for i := range a.Ports {
		if a.Ports[i] != b.Ports[i] {
			return false
		}
	}
	return true
}

// ApplyTableDelta builds the table that delta makes of base, and checks it
// against the digest the plan names.
func ApplyTableDelta(base *Table, delta []byte, wantDigest string) (*Table, error) {
	r := &reader{b: delta}
	n := r.count(MaxTableMembers, 0)
	if r.err != nil {
		return nil, r.err
	}
	ms := make([]Member, n)
	copy(ms, base.Members)
	set := make([]bool, n)
	for i := 0; i < min(n, len(base.Members)); i++ {
		set[i] = true
	}
	for len(r.b) > 0 && r.err == nil {
		i := r.uvarint()
		code := r.bytes(1)
		if r.err != nil {
			break
		}
		if i >= uint64(n) || int(code[0]) >= len(roleOrder) {
			return nil, errTable("delta: place %d of %d", i, n)
		}
		m := Member{Role: roleOrder[code[0]]}
		m.Node = string(r.bytes(min(r.uvarint(), MaxNodeIDLength+1)))
		m.Host = string(r.bytes(min(r.uvarint(), MaxNodeIDLength+1)))
		m.NProc = int(min(r.uvarint(), MaxNProc+1))
		m.Ports = readPorts(r, m.NProc)
		m.Lease = r.varint()
		ms[i], set[i] = m, true
	}
	if r.err != nil {
		return nil, r.err
	}
	for i, ok := range set {
		if !ok {
			return nil, errTable("delta: place %d left empty", i)
		}
	}
	if err := rerank(ms); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	if got := digest(encodeTable(ms)); got != wantDigest {
		return nil, errTable("delta gives digest %s, the plan names %s", got, wantDigest)
	}
	return &Table{Digest: wantDigest, Members: ms}, nil
}

// ErrTableMissing is returned when a plan's table cannot be found: its
// chunks are not (or no longer) stored.
var ErrTableMissing = errors.New("membership: the plan's rank table is not stored")
