package guard_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// The test binary doubles as the guard: argument "guard".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "guard" {
		os.Exit(guard.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// testGuard is a guard process driven over its socket as a sidecar would.
type testGuard struct {
	t       *testing.T
	conn    *os.File
	reports chan guard.Report
	out     *proctest.Buffer
	seq     int64
}

func startGuard(t *testing.T, cgroup string) *testGuard {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	// Non-blocking, so that closing it at the end interrupts the read.
	require.NoError(t, syscall.SetNonblock(fds[0], true))
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	out := &proctest.Buffer{}
	cmd := exec.Command(os.Args[0], "guard", "--marker", "test", "--cgroup", cgroup)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	theirs.Close()
	g := &testGuard{t: t, conn: ours, reports: make(chan guard.Report, 64), out: out}
	go func() {
		defer close(g.reports)
		r := bufio.NewReader(ours)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			if rep, err := guard.DecodeReport(line); err == nil {
				g.reports <- rep
			}
		}
	}()
	t.Cleanup(func() {
		ours.Close()
		_ = cmd.Wait()
	})
	g.next(guard.EventReady)
	return g
}

func (g *testGuard) send(c guard.Command) int64 {
	g.t.Helper()
	g.seq++
	c.Seq = g.seq
	line, err := guard.EncodeCommand(c)
	require.NoError(g.t, err)
	_, err = g.conn.Write(line)
	require.NoError(g.t, err)
	return c.Seq
}

// next returns the next report of the event, skipping others.
func (g *testGuard) next(ev guard.Event) guard.Report {
	g.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case rep, ok := <-g.reports:
			require.True(g.t, ok, "the guard exited; output:\n%s", g.out.String())
			if rep.Event == ev {
				return rep
			}
		case <-timeout:
			g.t.Fatalf("no %s report; output:\n%s", ev, g.out.String())
		}
	}
}

// warmSetup is a guard with lease 1 and one warm slot of s.py preloading
// m, which prints when it is imported; s.py prints its pid and RANK. It
// returns once the warm interpreter has imported m.
func warmSetup(t *testing.T, cgroup string) (g *testGuard, start func(gen int64) guard.Command, warmPid int) {
	t.Helper()
	g, start = warmTemplates(t, cgroup)
	return g, start, g.waitWarm()
}

// warmTemplates is warmSetup without the wait: the guard has been sent
// the lease and the warm slot's template.
func warmTemplates(t *testing.T, cgroup string) (g *testGuard, start func(gen int64) guard.Command) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "m.py"), []byte("import os\nprint('imported', os.getpid(), flush=True)\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "s.py"), []byte("import os, sys, time, m\nprint('ran', os.getpid(), os.environ['RANK'], flush=True)\nif sys.argv[1:] == ['wait']:\n    time.sleep(3600)\n"), 0o644))
	g = startGuard(t, cgroup)
	g.send(guard.Command{Op: guard.OpDeadline, Lease: 1, KillAt: guard.MonoNow() + int64(time.Hour)})
	argv := []string{"python3", "s.py", "wait"}
	g.send(guard.Command{Op: guard.OpWarm, Warm: []guard.Warm{{Slot: 0, Path: py, Argv: argv, Dir: dir, Env: os.Environ(), Prefix: "[warm 0] ", Preload: []string{"m"}}}})
	start = func(gen int64) guard.Command {
		return guard.Command{Op: guard.OpStart, Lease: 1, Generation: gen, Procs: []guard.Proc{
			{Rank: 0, Path: py, Argv: argv, Dir: dir, Env: append(os.Environ(), "RANK=5"), Prefix: "[rank 0] "}}}
	}
	return g, start
}

// waitWarm waits until a warm interpreter has imported its preload, and
// returns its pid.
func (g *testGuard) waitWarm() int {
	g.t.Helper()
	pid := g.next(guard.EventWarm).Pid
	require.Eventually(g.t, func() bool { return strings.Contains(g.out.String(), "[warm 0] imported "+strconv.Itoa(pid)) },
		30*time.Second, 5*time.Millisecond, "output:\n%s", g.out.String())
	return pid
}

// A start uses the idle warm interpreter, which becomes the command with
// the generation's environment; a stop ends the run but not the next warm
// interpreter, which the next start uses.
func TestAStartUsesTheWarmInterpreter(t *testing.T) {
	for _, mode := range []string{"auto", "off"} {
		t.Run("cgroup "+mode, func(t *testing.T) {
			g, start, warm := warmSetup(t, mode)
			g.send(start(1))
			st := g.next(guard.EventStarted)
			assert.Equal(t, []int{warm}, st.Pids)
			assert.Equal(t, 1, st.Warm)
			require.Eventually(t, func() bool { return strings.Contains(g.out.String(), "[rank 0] ran "+strconv.Itoa(warm)+" 5") },
				30*time.Second, 5*time.Millisecond, "output:\n%s", g.out.String())

			next := g.waitWarm()
			seq := g.send(guard.Command{Op: guard.OpStop})
			assert.Equal(t, warm, g.next(guard.EventExit).Pid)
			assert.Equal(t, seq, g.next(guard.EventClear).Seq, "clear does not wait for the idle warm interpreter")
			assert.True(t, proctest.Alive(next), "a stop keeps the idle warm interpreter")

			g.send(start(2))
			assert.Equal(t, []int{next}, g.next(guard.EventStarted).Pids)
		})
	}
}

// A guard that has started nothing warms at once, under a lease too: a
// start sent right after the templates, as the first start of a guard that
// replaced one that died is, becomes the warm interpreter, which may still
// be importing, instead of a cold process importing beside it.
func TestAStartRightAfterTheTemplatesRunsWarm(t *testing.T) {
	g, start := warmTemplates(t, "auto")
	g.send(start(1))
	warm := g.next(guard.EventWarm).Pid
	st := g.next(guard.EventStarted)
	assert.Equal(t, []int{warm}, st.Pids)
	assert.Equal(t, 1, st.Warm)
	require.Eventually(t, func() bool { return strings.Contains(g.out.String(), "[rank 0] ran "+strconv.Itoa(warm)+" 5") },
		30*time.Second, 5*time.Millisecond, "output:\n%s", g.out.String())
}

// A warm interpreter that is stopped, or stopped and continued, is killed
// at once and never used: the next start runs in its replacement (a guard
// that has started nothing yet replaces it at once) or cold.
func TestAFrozenWarmInterpreterIsKilled(t *testing.T) {
	for _, cont := range []bool{false, true} {
		t.Run("continued "+strconv.FormatBool(cont), func(t *testing.T) {
			g, start, warm := warmSetup(t, "auto")
			require.NoError(t, syscall.Kill(warm, syscall.SIGSTOP))
			if cont {
				// Once it stopped: SIGCONT discards a stop still pending,
				// and the process was never frozen.
				require.Eventually(t, func() bool { return stateOf(warm) == 'T' || !proctest.Alive(warm) }, 10*time.Second, time.Millisecond)
				_ = syscall.Kill(warm, syscall.SIGCONT) // gone already if the guard was quick
			}
			require.Eventually(t, func() bool { return !proctest.Alive(warm) }, 10*time.Second, 5*time.Millisecond)
			g.send(start(1))
			st := g.next(guard.EventStarted)
			assert.NotContains(t, st.Pids, warm)
		})
	}
}

// A fence kills the idle warm interpreters with everything else, and none
// starts again until a new deadline.
func TestAFenceKillsTheIdleWarmInterpreter(t *testing.T) {
	g, _, warm := warmSetup(t, "auto")
	seq := g.send(guard.Command{Op: guard.OpKill})
	assert.Equal(t, seq, g.next(guard.EventClear).Seq)
	assert.False(t, proctest.Alive(warm), "dead when the kill is reported done")
	g.send(guard.Command{Op: guard.OpDeadline, Lease: 2, KillAt: guard.MonoNow() + int64(time.Hour)})
	assert.NotEqual(t, warm, g.waitWarm())
}

// stateOf is the state letter of /proc/PID/stat.
func stateOf(pid int) byte {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}
