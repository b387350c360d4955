package memckpt

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/internal/testkit/pythons"
)

// A generation whose formation is cut half-way (a peer lost while the
// ranks meet) does not hang the next: rank 0 does not wait in its store
// for ranks that never come, and the next generation's ranks, two that
// were cut and one new process, form their group under the same names.
// Before, rank 0 waited in the store for the store's whole timeout, and
// the cut ranks' c10d counted the half-formed group, so the next
// rendezvous waited under another name for peers that never came.
func TestACutFormationDoesNotHangTheNext(t *testing.T) {
	for _, py := range pythons.Torches(t) {
		t.Run(py.Name, func(t *testing.T) { aCutFormationDoesNotHangTheNext(t, py.Path) })
	}
}

func aCutFormationDoesNotHangTheNext(t *testing.T, python string) {
	who := []string{"early", "early", "late"}
	outs := threeRanks(t, python, "testdata/cut_formation.py", func(rank int) []string { return []string{who[rank]} },
		func(rank int, err error) { assert.NoError(t, err, "rank %d", rank) })
	for rank := range 3 {
		out := outs[rank]
		if rank < 2 {
			assert.Contains(t, out, "gen1 cut after", "rank %d: the cut ends generation 1's formation:\n%s", rank, out)
		}
		assert.Regexp(t, `gen2 formed in \S+s, sum 3\.0`, out, "rank %d:\n%s", rank, out)
	}
}
