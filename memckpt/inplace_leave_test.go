package memckpt

import (
	"bytes"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/pythons"
)

// Ranks asked to leave while they step stop together, at one step's start,
// and none is left waiting in gloo. Cutting their connections instead (as
// every leave did before) interrupts an all-reduce's 16 MB half-way on
// some rank, and gloo never fails a send a closed connection interrupted:
// that rank waits out the group's timeout, and its guard kills it.
func TestRanksAskedToLeaveWhileSteppingStopTogether(t *testing.T) {
	for _, py := range pythons.Torches(t) {
		t.Run(py.Name, func(t *testing.T) { ranksAskedToLeaveWhileSteppingStopTogether(t, py.Path) })
	}
}

func ranksAskedToLeaveWhileSteppingStopTogether(t *testing.T, python string) {
	const gens = 6
	outs := leaveWhileStepping(t, python, gens, "leave")
	line := regexp.MustCompile(`gen (\d+) stopped at step (\d+), (\w+)`)
	for rank, out := range outs {
		assert.NotContains(t, out, "hung", "rank %d:\n%s", rank, out)
	}
	stops := map[string][]string{}
	for rank, out := range outs {
		for _, m := range line.FindAllStringSubmatch(out, -1) {
			assert.Equal(t, "clean", m[3], "rank %d, generation %s: stopped with the others, not cut:\n%s", rank, m[1], out)
			stops[m[1]] = append(stops[m[1]], m[2])
		}
	}
	require.Len(t, stops, gens, "every generation stopped:\n%v", outs)
	for g, at := range stops {
		require.Len(t, at, 3, "generation %s: every rank stopped", g)
		assert.Equal(t, at[0], at[1], "generation %s: ranks 0 and 1 stopped at one step", g)
		assert.Equal(t, at[0], at[2], "generation %s: ranks 0 and 2 stopped at one step", g)
	}
}

// leaveWhileStepping runs testdata/leave_while_stepping.py's three ranks
// and returns what each printed.
func leaveWhileStepping(t *testing.T, python string, gens int, mode string) []string {
	t.Helper()
	return threeRanks(t, python, "testdata/leave_while_stepping.py", func(int) []string { return []string{strconv.Itoa(gens), mode} }, nil)
}

// threeRanks runs script with python as ranks 0, 1 and 2, each with its rank, a free
// port and argsOf(rank), and returns what each printed; exited, if set, is
// told each rank's exit.
func threeRanks(t *testing.T, python, script string, argsOf func(rank int) []string, exited func(rank int, err error)) []string {
	t.Helper()
	dir := moduleDir(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	outs := make([]bytes.Buffer, 3)
	var wg sync.WaitGroup
	for rank := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(python, append([]string{script, strconv.Itoa(rank), port}, argsOf(rank)...)...)
			cmd.Env = pyEnv(dir)
			cmd.Stdout, cmd.Stderr = &outs[rank], &outs[rank]
			err := cmd.Run()
			if exited != nil {
				exited(rank, err)
			}
		}()
	}
	wg.Wait()
	s := make([]string, 3)
	for i := range outs {
		s[i] = outs[i].String()
	}
	return s
}
