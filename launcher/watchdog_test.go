package launcher_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// watchdogOf finds the fence watchdog of a training process.
func watchdogOf(t *testing.T, trainer int) int {
	t.Helper()
	var found int
	require.Eventually(t, func() bool {
		found = findWatchdog(trainer)
		return found != 0
	}, 10*time.Second, 2*time.Millisecond, "no fence watchdog for process %d", trainer)
	return found
}

// findWatchdog is the live fence watchdog of a training process, 0 if none.
func findWatchdog(trainer int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 1 && args[1] == "fence-watch" && slices.Contains(args, strconv.Itoa(trainer)) && proctest.Alive(pid) {
			return pid
		}
	}
	return 0
}

// A sidecar and its guard frozen together (SIGSTOP of the supervisors
// only) while the trainer runs on: nothing of the supervisors can kill,
// and the trainer's fence watchdog, in its process group and cgroup,
// kills its whole tree at the deadline.
func TestAWatchdogKillsWhenTheSidecarAndGuardAreFrozen(t *testing.T) {
	for _, mode := range cgroupModes {
		t.Run("cgroup "+mode, func(t *testing.T) {
			host, pids := startHost(t, mode, "wrapper", 3*time.Second, "GRANDCHILD=sleep", "SETSID=1")
			g := guardOf(t, host.Process.Pid)
			watchdog := watchdogOf(t, pids[0])
			for _, pid := range []int{host.Process.Pid, g} {
				require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
			}
			for _, pid := range pids {
				require.True(t, proctest.Alive(pid), "process %d died before the supervisors froze: a machine too slow for this test", pid)
			}
			for _, pid := range append(pids, watchdog) {
				require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 30*time.Second, 5*time.Millisecond,
					"process %d outlived the deadline of its frozen sidecar and guard", pid)
			}
		})
	}
}

// A guard frozen on its own: the sidecar's renewals reach the watchdog all
// the same, which keeps the trainer running past many deadlines that were
// each renewed; the sidecar's own fence still kills it.
func TestRenewalsReachTheWatchdogPastAFrozenGuard(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	l, _ := newLauncher(t, "auto", "sleep", "PIDFILE="+pidfile)
	renew := func() { require.NoError(t, l.SetDeadline(lease, time.Now().Add(time.Second))) }
	renew()
	exits, err := l.Start(procs(1), lease)
	require.NoError(t, err)
	trainer := readPid(t, pidfile)
	watchdog := watchdogOf(t, trainer)
	g := guardOf(t, os.Getpid())
	require.NoError(t, syscall.Kill(g, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(g, syscall.SIGCONT) })

	// Three deadlines' worth of renewals, one every 100 ms.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for range 30 {
		<-tick.C
		renew()
		require.True(t, proctest.Alive(trainer), "the watchdog killed the trainer while the sidecar renewed")
	}
	assert.True(t, proctest.Alive(watchdog))

	require.NoError(t, l.Kill(t.Context()))
	assert.Equal(t, 137, wait(t, exits).Code)
	for _, pid := range []int{trainer, watchdog} {
		require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 10*time.Second, 5*time.Millisecond,
			"process %d outlived the sidecar's fence", pid)
	}
}

// A trainer and its watchdog frozen together (a SIGSTOP of the process
// group) past the deadline, beside frozen supervisors: thawed, the
// watchdog finds the deadline passed and kills at once. The trainer may
// run for the moment that takes; the guard's commit fence covers it.
func TestAFrozenTrainerAndWatchdogAreKilledOnThaw(t *testing.T) {
	for _, mode := range cgroupModes {
		t.Run("cgroup "+mode, func(t *testing.T) {
			host, pids := startHost(t, mode, "sleep", 2*time.Second)
			trainer := pids[0]
			watchdogOf(t, trainer)
			node := proctest.FreezeTree(host.Process.Pid)
			t.Cleanup(func() { proctest.Thaw(node) })
			require.Len(t, node, 4, "the host, its guard, the trainer and its watchdog")
			time.Sleep(3 * time.Second) // past the deadline, while nothing of the node runs
			require.True(t, proctest.Alive(trainer))
			require.NoError(t, syscall.Kill(-trainer, syscall.SIGCONT)) // the process group alone
			require.Eventually(t, func() bool { return !proctest.Alive(trainer) }, 30*time.Second, 5*time.Millisecond,
				"a trainer thawed past its deadline ran on")
			require.Eventually(t, func() bool { return findWatchdog(trainer) == 0 }, 10*time.Second, 5*time.Millisecond,
				"the watchdog outlived its kill")
		})
	}
}

// A trainer that exits on its own takes its watchdog with it, even while
// the guard, which would otherwise end it, is frozen; nothing is left once
// the guard reports the node clear.
func TestAWatchdogEndsWithItsTrainer(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	l, _ := newLauncher(t, "auto", "untilusr1", "PIDFILE="+pidfile)
	exits, err := l.Start(procs(1), lease)
	require.NoError(t, err)
	trainer := readPid(t, pidfile)
	watchdog := watchdogOf(t, trainer)
	g := guardOf(t, os.Getpid())
	require.NoError(t, syscall.Kill(g, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(g, syscall.SIGCONT) })

	require.NoError(t, syscall.Kill(trainer, syscall.SIGUSR1))
	require.Eventually(t, func() bool { return !proctest.Alive(watchdog) }, 10*time.Second, 2*time.Millisecond,
		"the watchdog outlived its trainer")
	require.NoError(t, syscall.Kill(g, syscall.SIGCONT))
	assert.Equal(t, 0, wait(t, exits).Code)
	require.NoError(t, l.Stop(t.Context(), time.Second))
	_, err = os.Stat(fmt.Sprintf("/proc/%d", watchdog))
	assert.True(t, os.IsNotExist(err), "the watchdog was reaped before the stop returned")
	_, err = l.Start(procs(1), lease)
	require.NoError(t, err, "the next generation starts")
}
