package memckpt

import (
	"bytes"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A generation whose formation is cut half-way (a peer lost while the
// ranks meet) does not hang the next: rank 0 does not wait in its store
// for ranks that never come, and the next generation's ranks, two that
// were cut and one new process, form their group under the same names.
// Before, rank 0 waited in the store for the store's whole timeout, and
// the cut ranks' c10d counted the half-formed group, so the next
// rendezvous waited under another name for peers that never came.
func TestACutFormationDoesNotHangTheNext(t *testing.T) {
	requireTorch(t)
	dir := moduleDir(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())

	outs := make([]bytes.Buffer, 3)
	var wg sync.WaitGroup
	for rank, who := range []string{"early", "early", "late"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(python, "testdata/cut_formation.py", strconv.Itoa(rank), port, who)
			cmd.Env = pyEnv(dir)
			cmd.Stdout, cmd.Stderr = &outs[rank], &outs[rank]
			assert.NoError(t, cmd.Run(), "rank %d", rank)
		}()
	}
	wg.Wait()
	for rank := range 3 {
		out := outs[rank].String()
		if rank < 2 {
			assert.Contains(t, out, "gen1 cut after", "rank %d: the cut ends generation 1's formation:\n%s", rank, out)
		}
		assert.Regexp(t, `gen2 formed in \S+s, sum 3\.0`, out, "rank %d:\n%s", rank, out)
	}
}
