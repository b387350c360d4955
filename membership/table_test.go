package membership_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

// bigTable is a table as a large job has one, made hard to compress: pod
// names with a random suffix (a Deployment's), pod IPs in no order, nproc
// ports from one base, leases granted in some order with gaps.
func bigTable(n, nproc int) []membership.Member {
	rng := rand.New(rand.NewPCG(1, 2))
	const letters = "bcdfghjklmnpqrstvwxz2456789"
	ms := make([]membership.Member, n)
	lease := int64(0x694d9a3b0c2e0000)
	for i := range ms {
		suffix := make([]byte, 5)
		for k := range suffix {
			suffix[k] = letters[rng.IntN(len(letters))]
		}
		lease += 1 + rng.Int64N(40)
		ports := make([]int, nproc)
		for p := range ports {
			ports[p] = 6170 + p
		}
		ms[i] = membership.Member{Node: fmt.Sprintf("trainer-worker-%d-%s", i, suffix), Role: membership.RoleWorker,
			Host: fmt.Sprintf("10.%d.%d.%d", rng.IntN(256), rng.IntN(256), rng.IntN(256)), Ports: ports, NProc: nproc,
			Lease: lease}
	}
	ms[n-1].Role = membership.RolePS
	return ms
}

func TestTableSnapshotRoundTrip(t *testing.T) {
	ms := bigTable(1000, 2)
	table, err := membership.NewTable(ms)
	require.NoError(t, err)
	got, err := membership.DecodeTableSnapshot(table.TableSnapshot(), table.Digest)
	require.NoError(t, err)
	assert.Equal(t, table.Members, got.Members)
	m, ok := got.Member(ms[7].Node)
	require.True(t, ok)
	assert.Equal(t, 7, m.Rank)
	assert.Equal(t, 14, m.GlobalRank)
	ps, _ := got.Member(ms[999].Node)
	assert.Equal(t, 0, ps.Rank, "ranks count within a role")

	_, err = membership.DecodeTableSnapshot(table.TableSnapshot(), "00000000000000000000000000000000")
	require.ErrorIs(t, err, membership.ErrInvalidRecord, "a snapshot is checked against the digest the plan names")
}

func TestTableDeltaOfOneReplacedMemberIsSmall(t *testing.T) {
	ms := bigTable(10000, 1)
	base, err := membership.NewTable(ms)
	require.NoError(t, err)
	ms[4321] = membership.Member{Node: "trainer-worker-10000", Role: membership.RoleWorker, Host: "10.0.99.1", Ports: []int{6170}, NProc: 1, Lease: 0x694d9a3b0c2f0001}
	next, err := membership.NewTable(ms)
	require.NoError(t, err)

	ops, ok := next.TableDelta(base)
	require.True(t, ok)
	assert.Less(t, len(ops), 64, "one replaced member")
	got, err := membership.ApplyTableDelta(base, ops, next.Digest)
	require.NoError(t, err)
	assert.Equal(t, next.Members, got.Members)

	_, err = membership.ApplyTableDelta(next, ops, next.Digest)
	require.NoError(t, err, "applied to a table that already has it, the delta changes nothing")
	_, err = membership.ApplyTableDelta(base, ops[:len(ops)-1], next.Digest)
	require.ErrorIs(t, err, membership.ErrInvalidRecord)

	// Shrinking by one: the new length drops the last place.
	shrunk, err := membership.NewTable(ms[:len(ms)-2])
	require.NoError(t, err)
	ops, ok = shrunk.TableDelta(next)
	require.True(t, ok)
	got, err = membership.ApplyTableDelta(next, ops, shrunk.Digest)
	require.NoError(t, err)
	assert.Equal(t, shrunk.Members, got.Members)
}

// TestTheLargestJobFitsEtcdsRequestLimit: 100,000 members of 8 processes
// each, with the plan record that names the table, fit in chunks that each
// stay within etcd's default request limit (1.5 MiB).
func TestTheLargestJobFitsEtcdsRequestLimit(t *testing.T) {
	ms := bigTable(100000, 8)
	p := membership.Plan{Generation: 3, Phase: membership.PhaseRun, Members: ms, WorldSize: 799992, Master: "10.0.0.0:6170", MaxRestarts: 3}
	stored, err := membership.StorePlan(p, nil, nil, 0)
	require.NoError(t, err)
	for _, c := range stored.Chunks {
		assert.LessOrEqual(t, len(c), membership.TableChunkBytes)
	}
	assert.Less(t, len(stored.Record), 1024, "the plan record names the table; it does not hold it")
	t.Logf("100,000 members x 8 processes: %d bytes compressed in %d chunks; record %d bytes", stored.Plan.Table.Bytes, len(stored.Chunks), len(stored.Record))

	back, err := membership.DecodePlan([]byte(stored.Record))
	require.NoError(t, err)
	require.True(t, back.Unresolved())
	var snapshot []byte
	for _, c := range stored.Chunks {
		snapshot = append(snapshot, c...)
	}
	table, err := membership.TableSource{Fetch: func(membership.TableRef) ([]byte, error) { return snapshot, nil }}.Resolve(*back.Table, back.Delta, nil)
	require.NoError(t, err)
	back.AttachTable(table)
	m, ok := back.Member(ms[77777].Node)
	require.True(t, ok)
	assert.Equal(t, 77777*8, m.GlobalRank)
}

func TestStorePlanKeepsAStoredTable(t *testing.T) {
	ms := bigTable(8, 1)
	first, err := membership.StorePlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: ms}, nil, nil, 0)
	require.NoError(t, err)
	require.Len(t, first.Chunks, 1)
	assert.Nil(t, first.Plan.Delta)

	stop, err := membership.StorePlan(membership.Plan{Generation: 2, Phase: membership.PhaseStop, Members: ms, Table: first.Plan.Table}, first.Plan.RankTable(), first.Plan.Table, 0)
	require.NoError(t, err)
	assert.Empty(t, stop.Chunks, "a stop phase names the running table")
	assert.Equal(t, first.Plan.Table, stop.Plan.Table)

	same, err := membership.StorePlan(membership.Plan{Generation: 2, Phase: membership.PhaseRun, Members: ms}, first.Plan.RankTable(), first.Plan.Table, 0)
	require.NoError(t, err)
	assert.Empty(t, same.Chunks, "a restart with the same members stores no table")
	assert.Equal(t, int64(1), same.Plan.Table.Generation)

	ms[3].Lease++
	changed, err := membership.StorePlan(membership.Plan{Generation: 3, Phase: membership.PhaseRun, Members: ms}, first.Plan.RankTable(), first.Plan.Table, 0)
	require.NoError(t, err)
	require.Len(t, changed.Chunks, 1)
	require.NotNil(t, changed.Plan.Delta)
	assert.Equal(t, first.Plan.Table.Digest, changed.Plan.Delta.Base)
}

func FuzzDecodeTableSnapshot(f *testing.F) {
	table, err := membership.NewTable(bigTable(5, 3))
	require.NoError(f, err)
	f.Add(table.TableSnapshot(), []byte{5, 2, 1, 0})
	f.Fuzz(func(t *testing.T, snapshot, delta []byte) {
		if got, err := membership.DecodeTableSnapshot(snapshot, table.Digest); err == nil {
			assert.Equal(t, table.Members, got.Members)
		}
		_, _ = membership.ApplyTableDelta(table, delta, table.Digest)
	})
}

// TestANodeWithThePreviousTableReadsNoSnapshot: a node that holds the base
// applies the delta; only one without it reads the stored snapshot; and a
// cached table is not decoded again.
func TestANodeWithThePreviousTableReadsNoSnapshot(t *testing.T) {
	ms := bigTable(100, 1)
	first, err := membership.StorePlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: ms}, nil, nil, 0)
	require.NoError(t, err)
	ms[42].Lease++
	next, err := membership.StorePlan(membership.Plan{Generation: 3, Phase: membership.PhaseRun, Members: ms}, first.Plan.RankTable(), first.Plan.Table, 0)
	require.NoError(t, err)
	require.NotNil(t, next.Plan.Delta)

	fetches := 0
	src := membership.TableSource{Fetch: func(membership.TableRef) ([]byte, error) {
		fetches++
		return next.Chunks[0], nil
	}}
	got, err := src.Resolve(*next.Plan.Table, next.Plan.Delta, first.Plan.RankTable())
	require.NoError(t, err)
	assert.Equal(t, 0, fetches, "the delta applies to the table the node holds")
	assert.Equal(t, next.Plan.Table.Digest, got.Digest)

	got, err = src.Resolve(*next.Plan.Table, next.Plan.Delta, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, fetches, "a node without the base reads the snapshot")
	assert.Equal(t, next.Plan.Members, got.Members)

	src.Cache = &membership.TableCache{}
	src.Cache.Put(got)
	_, err = src.Resolve(*next.Plan.Table, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, fetches, "a cached table is not read again")
}

// TestAPlanRecordStaysSmall: however many members change, the record every
// node watches carries a delta of at most MaxDeltaBytes; beyond it nodes
// read the snapshot.
func TestAPlanRecordStaysSmall(t *testing.T) {
	ms := bigTable(10000, 1)
	first, err := membership.StorePlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: ms}, nil, nil, 0)
	require.NoError(t, err)
	for i := 0; i < len(ms); i += 5 { // a fifth of the members come back under new leases
		ms[i].Lease += 1 << 40
	}
	next, err := membership.StorePlan(membership.Plan{Generation: 3, Phase: membership.PhaseRun, Members: ms}, first.Plan.RankTable(), first.Plan.Table, 0)
	require.NoError(t, err)
	assert.Nil(t, next.Plan.Delta, "a delta that large is left out")
	assert.Less(t, len(next.Record), 1024)
}
