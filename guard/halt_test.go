package guard_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/memckpt"
)

// stepper steps through the trainers' module (elastic.beat), a step every
// 20 ms, and says each step on standard error, where its stack goes too.
const stepper = `import sys, time
import elastic
n = 0
while True:
    n += 1
    elastic.beat(step=n)
    print("step", n, file=sys.stderr, flush=True)
    time.sleep(0.02)
`

// A stop with stacks halts every rank's page with its signal: a rank
// writes its stack and takes no further step of the generation that is
// over, the stopped one that is continued to write it included, though
// the kill comes only after the wait for the stacks. Without the halt each
// would step ten times more.
func TestAStopWithStacksHaltsTheRanks(t *testing.T) {
	j := newHangJob(t)
	modules := t.TempDir()
	require.NoError(t, memckpt.WriteModule(modules))
	script := filepath.Join(j.dir, "stepper.py")
	require.NoError(t, os.WriteFile(script, []byte(stepper), 0o644))
	procs := make([]guard.Proc, 2)
	for rank := range procs {
		procs[rank] = guard.Proc{Rank: rank, Path: j.py, Argv: []string{"python3", script}, Dir: j.dir,
			Env: append(os.Environ(), "PYTHONPATH="+modules), Prefix: "[rank " + strconv.Itoa(rank) + "] "}
	}
	pids := j.start(1, &guard.Watch{TimeoutNanos: int64(time.Hour)}, procs...)
	j.printed("[rank 0] step 3\n")
	j.printed("[rank 1] step 3\n")
	require.NoError(t, syscall.Kill(pids[1], syscall.SIGSTOP))
	require.Eventually(t, func() bool { return stateOf(pids[1]) == 'T' }, 30*time.Second, time.Millisecond)

	ex, _ := of(guard.EventExit, j.stop(guard.Command{Stacks: true}))
	for rank := range 2 {
		prefix := "[rank " + strconv.Itoa(rank) + "] "
		var after []string
		stack := false
		for _, line := range strings.Split(j.out.String(), "\n") {
			switch {
			case strings.HasPrefix(line, prefix+"Current thread"):
				stack = true
			case stack && strings.HasPrefix(line, prefix+"step "):
				after = append(after, line)
			}
		}
		assert.True(t, stack, "rank %d wrote its stack; output:\n%s", rank, j.out.String())
		assert.LessOrEqual(t, len(after), 1, "rank %d stepped on after its stack: %q", rank, after)
		assert.Equal(t, int(syscall.SIGKILL), ex[rank].Signal, "rank %d was killed", rank)
	}
}
