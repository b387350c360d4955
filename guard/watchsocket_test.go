package guard_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
)

// A guard without a deadline page starts no watchdogs: its processes get
// an empty watchdog socket, whatever they inherited, and commit through the
// guard.
func TestWithoutADeadlinePageProcessesHaveNoWatchdogSocket(t *testing.T) {
	g := startGuard(t, "off")
	g.send(guard.Command{Op: guard.OpDeadline, Lease: 1, KillAt: guard.MonoNow() + int64(time.Hour)})
	env := append(os.Environ(), guard.EnvWatchdogSocket+"=@an-outer-guards-watchdog")
	g.send(guard.Command{Op: guard.OpStart, Lease: 1, Generation: 1, Procs: []guard.Proc{{
		Rank: 0, Path: "/bin/sh", Argv: []string{"sh", "-c", `echo "watchdog=[$` + guard.EnvWatchdogSocket + `]"`},
		Env: env, Prefix: "[rank 0] ",
	}}})
	require.Zero(t, g.next(guard.EventExit).Code)
	require.Eventually(t, func() bool { return strings.Contains(g.out.String(), "[rank 0] watchdog=[]\n") },
		10*time.Second, 5*time.Millisecond, "output:\n%s", g.out.String())
}
