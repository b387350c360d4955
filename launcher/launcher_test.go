package launcher_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/launcher"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/trainerenv"
)

// The test binary doubles as the guard (argument "guard"), its fence
// watchdogs ("fence-watch") and the training process: LAUNCHER_TEST_CHILD
// says what the process does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "guard" {
		os.Exit(guard.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "fence-watch" {
		os.Exit(guard.WatchMain(os.Args[2:], os.Stderr))
	}
	switch os.Getenv("LAUNCHER_TEST_CHILD") {
	case "":
		goleak.VerifyTestMain(m)
	case "env":
		for _, k := range []string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
			"PADDLE_TRAINER_ID", "PADDLE_CURRENT_ENDPOINT", "PADDLE_TRAINER_ENDPOINTS", "MS_ROLE", "ELASTIC_GENERATION", "KEEP"} {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
	case "exit":
		// Rank 1 fails with the code asked for; the others run until told
		// to stop.
		if os.Getenv("RANK") == "1" {
			code, _ := strconv.Atoi(os.Getenv("CODE"))
			os.Exit(code)
		}
		waitForSignal(0)
	case "sleep":
		writePid("")
		waitForSignal(0)
	case "untilusr1":
		// Exits 0 on SIGUSR1.
		writePid("")
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1)
		<-ch
		os.Exit(0)
	case "slowstop":
		// Takes SLOWSTOP_MS to exit after SIGTERM, as a trainer saving a
		// checkpoint does.
		writePid("")
		ms, _ := strconv.Atoi(os.Getenv("SLOWSTOP_MS"))
		waitForSignal(time.Duration(ms) * time.Millisecond)
	case "stubborn":
		// Ignores SIGTERM, and leaves a grandchild in its process group.
		signal.Ignore(syscall.SIGTERM)
		startGrandchild("sleep", false)
		writePid("")
		select {}
	case "wrapper":
		// A shell script that runs python without exec: it exits at once on
		// SIGTERM, while its child (same process group, or escaped into a
		// session of its own with SETSID) is slow to stop.
		startGrandchild(os.Getenv("GRANDCHILD"), os.Getenv("SETSID") != "")
		writePid("")
		waitForSignal(0)
	case "partial":
		fmt.Print("no newline at the end")
	case "committer":
		// Commits a checkpoint holding the time it was written, again and
		// again, until it is killed; through its fence watchdog, or its
		// guard when the watchdog cannot be reached.
		dir := os.Getenv("CKPT_DIR")
		gen, _ := strconv.ParseInt(os.Getenv("ELASTIC_GENERATION"), 10, 64)
		writePid("")
		for {
			tmp := filepath.Join(dir, "ckpt.tmp")
			_ = os.WriteFile(tmp, []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0o600)
			_ = guard.FenceFromEnv(os.Getenv).Commit(gen, tmp, filepath.Join(dir, "ckpt"))
		}
	case "fencecommitter":
		fenceCommitter()
	case "host":
		host()
	case "progress":
		progressChild()
	}
	os.Exit(0)
}

// host is a sidecar in a process of its own: it runs a launcher, starts
// HOST_CHILD, sets a deadline HOST_DEADLINE_MS from the moment the child
// (and a wrapper's grandchild) wrote its pid, and waits to be killed or
// stopped.
func host() {
	l, err := launcher.New(launcher.Config{
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     withoutVar(os.Environ(), "LAUNCHER_TEST_CHILD", os.Getenv("HOST_CHILD")),
		Guard:   guardCommand(os.Getenv("HOST_CGROUP")),
	})
	if err != nil {
		os.Exit(4)
	}
	if err := l.SetDeadline(7, time.Now().Add(time.Hour)); err != nil {
		os.Exit(5)
	}
	if _, err := l.Start(procs(1), 7); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(6)
	}
	if ms, _ := strconv.Atoi(os.Getenv("HOST_DEADLINE_MS")); ms > 0 {
		// From when the processes run, however long a loaded machine
		// takes to start them.
		files := []string{os.Getenv("PIDFILE")}
		if os.Getenv("HOST_CHILD") == "wrapper" {
			files = append(files, files[0]+".grandchild")
		}
		for _, f := range files {
			for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(5 * time.Millisecond) {
				if _, err := os.Stat(f); err == nil {
					break
				}
			}
		}
		at := time.Now().Add(time.Duration(ms) * time.Millisecond)
		if err := l.SetDeadline(7, at); err != nil {
			os.Exit(5)
		}
		writeDeadline(at)
	}
	writePid(".host")
	select {}
}

func guardCommand(cgroup string) []string {
	if cgroup == "" {
		cgroup = "auto"
	}
	return []string{os.Args[0], "guard", "--cgroup", cgroup}
}

// startGrandchild starts a process of the given mode, in the caller's
// process group or in a session of its own.
func startGrandchild(mode string, setsid bool) {
	grandchild := exec.Command(os.Args[0], "-test.run=^$")
	grandchild.Env = append(withoutVar(os.Environ(), "LAUNCHER_TEST_CHILD", mode), "PIDFILE="+os.Getenv("PIDFILE")+".grandchild")
	grandchild.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
	if err := grandchild.Start(); err != nil {
		os.Exit(3)
	}
}

// withoutVar is env with name set to value, replacing what it held.
func withoutVar(env []string, name, value string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}

// waitForSignal waits for SIGTERM, then takes delay to exit.
func waitForSignal(delay time.Duration) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	<-ch
	time.Sleep(delay)
	os.Exit(143)
}

func writePid(suffix string) {
	if f := os.Getenv("PIDFILE"); f != "" {
		_ = os.WriteFile(f+suffix+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600)
		_ = os.Rename(f+suffix+".tmp", f+suffix)
	}
}

// procs is node rank 1 of two workers in generation 3, with nproc
// processes from global rank 2.
func procs(nproc int) launcher.Procs { return procsOf(3, 2, nproc) }

// procsOf is node rank 1 of two workers in generation gen, with nproc
// processes from global rank base, and the environment package trainerenv
// gives them.
func procsOf(gen int64, base, nproc int) launcher.Procs {
	n := trainerenv.Node{
		Generation: trainerenv.Generation{Job: "job", Number: gen, Endpoints: membership.Endpoints{
			MasterAddr: "10.0.0.1", MasterPort: 6000,
			Nodes:     map[membership.Role]int{membership.RoleWorker: 2},
			Processes: map[membership.Role]int{membership.RoleWorker: 2 + nproc},
		}},
		Member: membership.Member{Node: "n1", Role: membership.RoleWorker, Rank: 1, GlobalRank: base, Host: "10.0.0.2", NProc: nproc},
	}
	p := launcher.Procs{Generation: gen, Role: "worker", NodeRank: 1, GlobalRankBase: base, WorldSize: n.WorldSize()}
	for l := range nproc {
		n.Member.Ports = append(n.Member.Ports, 7000+l)
		n.Endpoints.Trainers = append(n.Endpoints.Trainers, fmt.Sprintf("10.0.0.2:%d", 7000+l))
	}
	for l := range nproc {
		p.Env = append(p.Env, n.Env(l))
	}
	return p
}

// lines splits output into lines.
func lines(b *proctest.Buffer) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// lease is the lease the tests' processes run under.
const lease = 42

// cgroupModes are the ways the guard owns the tree: a cgroup of its own
// where the machine allows one, and the subreaper alone.
var cgroupModes = []string{"auto", "off"}

func newLauncher(t testing.TB, cgroup, child string, extraEnv ...string) (*launcher.Launcher, *proctest.Buffer) {
	out := &proctest.Buffer{}
	l, err := launcher.New(launcher.Config{
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     append(append(os.Environ(), "LAUNCHER_TEST_CHILD="+child, "GORACE=atexit_sleep_ms=0"), extraEnv...),
		Stdout:  out, Stderr: out,
		Guard: guardCommand(cgroup),
	})
	require.NoError(t, err)
	require.NoError(t, l.SetDeadline(lease, time.Now().Add(time.Hour)))
	t.Cleanup(l.Close)
	return l, out
}

func wait(t *testing.T, exits <-chan launcher.Exit) launcher.Exit {
	t.Helper()
	select {
	case e := <-exits:
		return e
	case <-time.After(30 * time.Second):
		t.Fatal("no exit")
		return launcher.Exit{}
	}
}

func TestChildrenGetTheirRanksEnvironment(t *testing.T) {
	l, out := newLauncher(t, "auto", "env", "KEEP=base", "RANK=overridden")
	exits, err := l.Start(procs(2), lease)
	require.NoError(t, err)
	assert.Equal(t, 0, wait(t, exits).Code)

	var got []string
	require.Eventually(t, func() bool {
		got = lines(out)
		return len(got) >= 24
	}, 10*time.Second, 5*time.Millisecond)
	for _, want := range []string{
		"[rank 2] RANK=2", "[rank 3] RANK=3", "[rank 2] LOCAL_RANK=0", "[rank 3] LOCAL_RANK=1",
		"[rank 2] WORLD_SIZE=4", "[rank 3] LOCAL_WORLD_SIZE=2", "[rank 2] MASTER_ADDR=10.0.0.1", "[rank 2] MASTER_PORT=6000",
		"[rank 3] PADDLE_TRAINER_ID=3", "[rank 3] PADDLE_CURRENT_ENDPOINT=10.0.0.2:7001",
		"[rank 2] PADDLE_TRAINER_ENDPOINTS=10.0.0.2:7000,10.0.0.2:7001", "[rank 2] MS_ROLE=MS_WORKER",
		"[rank 2] ELASTIC_GENERATION=3", "[rank 2] KEEP=base",
	} {
		assert.Contains(t, got, want)
	}
}

func TestExitCodes(t *testing.T) {
	t.Run("a failing process stops the others and its code is reported", func(t *testing.T) {
		l, _ := newLauncher(t, "auto", "exit", "CODE=7")
		// Ranks 0, 1, 2: rank 1 fails, the others wait for SIGTERM.
		exits, err := l.Start(procsOf(3, 0, 3), lease)
		require.NoError(t, err)
		e := wait(t, exits)
		assert.Equal(t, 7, e.Code)
		assert.Equal(t, "rank 1: exited with code 7", e.Message)
		assert.Empty(t, l.Pids(), "the other ranks were stopped and reaped")
	})
	t.Run("every process exiting 0 is success", func(t *testing.T) {
		l, _ := newLauncher(t, "auto", "env")
		exits, err := l.Start(procs(3), lease)
		require.NoError(t, err)
		assert.Equal(t, launcher.Exit{Code: 0, Message: "every process exited 0"}, wait(t, exits))
	})
	t.Run("a signal is reported as 128+signal", func(t *testing.T) {
		pidfile := filepath.Join(t.TempDir(), "pid")
		l, _ := newLauncher(t, "auto", "sleep", "PIDFILE="+pidfile)
		exits, err := l.Start(procs(1), lease)
		require.NoError(t, err)
		pid := readPid(t, pidfile)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		e := wait(t, exits)
		assert.Equal(t, 137, e.Code)
		assert.Contains(t, e.Message, "killed by signal killed")
	})
}

func TestStopEscalatesToSIGKILLAndTakesTheGroup(t *testing.T) {
	for _, mode := range cgroupModes {
		t.Run("cgroup "+mode, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "pid")
			l, _ := newLauncher(t, mode, "stubborn", "PIDFILE="+pidfile)
			exits, err := l.Start(procs(1), lease)
			require.NoError(t, err)
			child, grandchild := readPid(t, pidfile), readPid(t, pidfile+".grandchild")

			require.NoError(t, l.Stop(t.Context(), 200*time.Millisecond))
			assert.Equal(t, 137, wait(t, exits).Code, "SIGTERM was ignored, SIGKILL was not")
			assert.False(t, proctest.Alive(child), "the child is reaped")
			assert.False(t, proctest.Alive(grandchild), "the grandchild in the child's process group is gone when Stop returns")
			require.NoError(t, l.Stop(t.Context(), 0), "stopping twice is harmless")

			_, err = l.Start(procs(1), lease)
			require.NoError(t, err, "a new generation starts once the old one is gone")
		})
	}
}

// A training command that does not exec its trainer (bash train.sh) exits
// on SIGTERM before the trainer does: the stop is done when the trainer is,
// not when the direct child is reaped.
func TestStopWaitsForTheWholeTree(t *testing.T) {
	for _, mode := range cgroupModes {
		for _, setsid := range []bool{false, true} {
			t.Run(fmt.Sprintf("cgroup %s, grandchild in its own session %v", mode, setsid), func(t *testing.T) {
				pidfile := filepath.Join(t.TempDir(), "pid")
				env := []string{"PIDFILE=" + pidfile, "GRANDCHILD=slowstop", "SLOWSTOP_MS=300"}
				if setsid {
					env = append(env, "SETSID=1")
				}
				l, _ := newLauncher(t, mode, "wrapper", env...)
				_, err := l.Start(procs(1), lease)
				require.NoError(t, err)
				child, grandchild := readPid(t, pidfile), readPid(t, pidfile+".grandchild")

				require.NoError(t, l.Stop(t.Context(), 10*time.Second))
				assert.False(t, proctest.Alive(child))
				assert.False(t, proctest.Alive(grandchild), "Stop returned while the trainer below the wrapper ran")
			})
		}
	}
}

// startHost runs a launcher in a process of its own, as the sidecar does,
// and returns it with its child's and grandchild's pids.
func startHost(t *testing.T, cgroup, child string, deadline time.Duration, env ...string) (host *exec.Cmd, pids []int) {
	t.Helper()
	pidfile := filepath.Join(t.TempDir(), "pid")
	host = exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(append(os.Environ(), "LAUNCHER_TEST_CHILD=host", "HOST_CHILD="+child, "HOST_CGROUP="+cgroup,
		"PIDFILE="+pidfile, "GORACE=atexit_sleep_ms=0", fmt.Sprintf("HOST_DEADLINE_MS=%d", deadline.Milliseconds())), env...)
	host.Stderr = os.Stderr
	require.NoError(t, host.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(host.Process.Pid, syscall.SIGCONT)
		_ = host.Process.Kill()
		_ = host.Wait()
	})
	readPid(t, pidfile+".host")
	pids = []int{readPid(t, pidfile)}
	if _, err := os.Stat(pidfile + ".grandchild"); err == nil || child == "wrapper" {
		pids = append(pids, readPid(t, pidfile+".grandchild"))
	}
	return host, pids
}

// A sidecar killed with SIGKILL (or by the OOM killer) leaves no process
// behind, not even one its training command started without exec.
func TestTheTreeDiesWithTheSidecar(t *testing.T) {
	for _, mode := range cgroupModes {
		t.Run("cgroup "+mode, func(t *testing.T) {
			host, pids := startHost(t, mode, "wrapper", 0, "GRANDCHILD=sleep", "SETSID=1")
			require.NoError(t, host.Process.Kill())
			_ = host.Wait()
			for _, pid := range pids {
				require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 10*time.Second, 5*time.Millisecond,
					"process %d outlived its sidecar", pid)
			}
		})
	}
}

// A sidecar frozen with SIGSTOP cannot kill anything; its guard kills the
// processes when the deadline passes.
func TestAFrozenSidecarsProcessesDieAtTheDeadline(t *testing.T) {
	for _, mode := range cgroupModes {
		t.Run("cgroup "+mode, func(t *testing.T) {
			host, pids := startHost(t, mode, "wrapper", time.Second, "GRANDCHILD=sleep", "SETSID=1")
			require.NoError(t, syscall.Kill(host.Process.Pid, syscall.SIGSTOP))
			for _, pid := range pids {
				require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 10*time.Second, 5*time.Millisecond,
					"process %d outlived the deadline of its frozen sidecar", pid)
			}
		})
	}
}

// A deadline that passes during a graceful stop kills at once, instead of
// waiting out the grace period.
func TestADeadlinePassedWinsOverAGracefulStop(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	l, _ := newLauncher(t, "auto", "slowstop", "PIDFILE="+pidfile, "SLOWSTOP_MS=60000")
	_, err := l.Start(procs(1), lease)
	require.NoError(t, err)
	child := readPid(t, pidfile)

	stopped := make(chan error, 1)
	go func() { stopped <- l.Stop(context.Background(), time.Hour) }()
	require.Eventually(t, func() bool { return processState(child) == "S" }, 5*time.Second, time.Millisecond)
	require.NoError(t, l.SetDeadline(lease, time.Now().Add(200*time.Millisecond)))
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the stop waited for the grace period although the deadline passed")
	}
	assert.False(t, proctest.Alive(child))
}

// After a kill (the lease is lost) nothing starts for that lease; a new
// deadline for a new lease lets the next generation start.
func TestKillFencesTheLease(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	l, _ := newLauncher(t, "auto", "sleep", "PIDFILE="+pidfile)
	exits, err := l.Start(procs(1), lease)
	require.NoError(t, err)
	child := readPid(t, pidfile)
	require.NoError(t, l.Kill(t.Context()))
	assert.False(t, proctest.Alive(child))
	assert.Equal(t, 137, wait(t, exits).Code)

	_, err = l.Start(procs(1), lease)
	require.Error(t, err, "a start for the lost lease is refused")
	require.NoError(t, l.SetDeadline(lease+1, time.Now().Add(time.Hour)))
	_, err = l.Start(procs(1), lease)
	require.Error(t, err, "a start for another lease than the current one is refused")
	_, err = l.Start(procs(1), lease+1)
	require.NoError(t, err)
}

// When a whole node freezes and thaws after its deadline, its trainer may
// run for a moment before the guard kills it: the guard refuses any commit
// it asks for then.
func TestAThawedTrainerCannotCommit(t *testing.T) {
	for _, mode := range cgroupModes {
		t.Run("cgroup "+mode, func(t *testing.T) {
			dir := t.TempDir()
			host, pids := startHost(t, mode, "committer", 2*time.Second, "CKPT_DIR="+dir)
			require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "ckpt")); return err == nil },
				10*time.Second, time.Millisecond, "the trainer never committed")
			// Everything of the node: the trainer's fence watchdog too.
			node := proctest.FreezeTree(host.Process.Pid)
			require.Contains(t, node, watchdogOf(t, pids[0]))
			frozenAt := time.Now()
			time.Sleep(3 * time.Second)           // past the deadline, while nothing of the node runs
			for i := len(node) - 1; i >= 0; i-- { // the trainer first, the guard last
				require.NoError(t, syscall.Kill(node[i], syscall.SIGCONT))
			}
			require.Eventually(t, func() bool { return !proctest.Alive(pids[0]) }, 10*time.Second, time.Millisecond)
			data, err := os.ReadFile(filepath.Join(dir, "ckpt"))
			require.NoError(t, err)
			written, err := strconv.ParseInt(string(data), 10, 64)
			require.NoError(t, err)
			assert.Less(t, written, frozenAt.UnixNano(), "a checkpoint written after the thaw was committed")
		})
	}
}

func TestACommitOfAnotherGenerationIsRefused(t *testing.T) {
	dir := t.TempDir()
	l, _ := newLauncher(t, "auto", "committer", "CKPT_DIR="+dir)
	p := procs(1)
	_, err := l.Start(p, lease)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "ckpt")); return err == nil },
		10*time.Second, time.Millisecond, "the trainer of the current generation commits")
	// This test process is no descendant of the guard: refused whatever
	// it asks.
	socket := guardSocket(t, l)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x"), nil, 0o600))
	err = guard.Commit(socket, p.Generation, filepath.Join(dir, "x"), filepath.Join(dir, "y"))
	assert.ErrorContains(t, err, "not a process of this guard")
}

func TestPartialLastLineIsFlushed(t *testing.T) {
	l, out := newLauncher(t, "auto", "partial")
	exits, err := l.Start(procs(1), lease)
	require.NoError(t, err)
	wait(t, exits)
	assert.Equal(t, []string{"[rank 2] no newline at the end"}, lines(out))
}

func TestStartFailsForAMissingCommand(t *testing.T) {
	notExecutable := filepath.Join(t.TempDir(), "train.py")
	require.NoError(t, os.WriteFile(notExecutable, []byte("print(1)\n"), 0o644))
	for _, tc := range []struct {
		program string
		code    int
		message string
	}{
		{"/nonexistent/trainer", 127, "training command /nonexistent/trainer: not found"},
		{"no-such-trainer-in-path", 127, "training command no-such-trainer-in-path: not found in PATH"},
		{notExecutable, 126, "not executable"},
	} {
		l, err := launcher.New(launcher.Config{Command: []string{tc.program}, Guard: guardCommand("auto")})
		require.NoError(t, err)
		_, err = l.Start(procs(1), lease)
		assert.ErrorContains(t, err, tc.message)
		var cannot *launcher.StartError
		require.ErrorAs(t, err, &cannot, "no restart mends it")
		assert.Equal(t, tc.code, cannot.Code)
		l.Close()
	}
	_, err := launcher.New(launcher.Config{})
	assert.ErrorContains(t, err, "no command")
}

// TestEachRankHasItsLogFile: with Logs, every process's output goes to a
// file of its rank, each generation after a line that names it, and only
// rank 0's reaches the terminal with TeeRank0; past its bound a file is
// rotated.
func TestEachRankHasItsLogFile(t *testing.T) {
	dir := t.TempDir()
	out := &proctest.Buffer{}
	l, err := launcher.New(launcher.Config{
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     append(os.Environ(), "LAUNCHER_TEST_CHILD=env", "KEEP=kept", "GORACE=atexit_sleep_ms=0"),
		Stdout:  out, Stderr: out, Guard: guardCommand("auto"),
		Logs: &launcher.Logs{Dir: dir, Tee: launcher.TeeRank0},
	})
	require.NoError(t, err)
	t.Cleanup(l.Close)
	require.NoError(t, l.SetDeadline(lease, time.Now().Add(time.Hour)))
	for gen := int64(3); gen <= 4; gen++ {
		exits, err := l.Start(procsOf(gen, 0, 2), lease)
		require.NoError(t, err)
		assert.Equal(t, 0, wait(t, exits).Code)
	}
	for _, line := range lines(out) {
		assert.True(t, strings.HasPrefix(line, "[rank 0] "), "only rank 0 on the terminal: %q", line)
	}
	assert.Contains(t, out.String(), "[rank 0] RANK=0")

	rank1, err := os.ReadFile(filepath.Join(dir, "rank-1.log"))
	require.NoError(t, err)
	text := string(rank1)
	assert.Contains(t, text, "==== generation 3: worker rank 1 of 4 (node rank 1, local rank 1), ")
	assert.Contains(t, text, "==== generation 4: worker rank 1 of 4")
	assert.Equal(t, 2, strings.Count(text, "\nRANK=1\n"), "the output of both generations, unprefixed")
	assert.Equal(t, 2, strings.Count(text, "==== exited with code 0 ===="))
	_, err = os.Stat(filepath.Join(dir, "rank-0.log"))
	assert.NoError(t, err, "rank 0's output is kept too")

	// A bound of a few bytes rotates the file at every line.
	small, err := launcher.New(launcher.Config{
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     append(os.Environ(), "LAUNCHER_TEST_CHILD=env", "GORACE=atexit_sleep_ms=0"),
		Stdout:  out, Stderr: out, Guard: guardCommand("auto"),
		Logs: &launcher.Logs{Dir: filepath.Join(dir, "small"), Tee: launcher.TeeNone, MaxBytes: 64},
	})
	require.NoError(t, err)
	t.Cleanup(small.Close)
	require.NoError(t, small.SetDeadline(lease, time.Now().Add(time.Hour)))
	exits, err := small.Start(procs(1), lease)
	require.NoError(t, err)
	wait(t, exits)
	for _, name := range []string{"rank-2.log", "rank-2.log.1"} {
		info, err := os.Stat(filepath.Join(dir, "small", name))
		require.NoError(t, err, name)
		assert.LessOrEqual(t, info.Size(), int64(64+200), "%s is bounded", name)
	}
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(file)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	}, 10*time.Second, 2*time.Millisecond, "no pid in %s", file)
	return pid
}

// processState is the state letter of a process in /proc.
func processState(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}

// guardOf finds the guard process below a host.
func guardOf(t *testing.T, host int) int {
	t.Helper()
	for _, pid := range guard.Descendants(host) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 && args[1] == "guard" {
			return pid
		}
	}
	t.Fatal("no guard below the host")
	return 0
}

// guardSocket reads the commit socket from the environment of the
// launcher's running process.
func guardSocket(t *testing.T, l *launcher.Launcher) string {
	t.Helper()
	pids := l.Pids()
	require.NotEmpty(t, pids)
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pids[0]))
	require.NoError(t, err)
	for _, kv := range strings.Split(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, guard.EnvFenceSocket+"="); ok {
			return v
		}
	}
	t.Fatal("no commit socket in the environment")
	return ""
}

// A guard killed with SIGKILL takes its direct children with it; what they
// leave behind is swept, and the next start gets a new guard.
func TestAKilledGuardLeavesNothingBehind(t *testing.T) {
	for _, mode := range cgroupModes {
		t.Run("cgroup "+mode, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "pid")
			l, _ := newLauncher(t, mode, "wrapper", "PIDFILE="+pidfile, "GRANDCHILD=sleep", "SETSID=1")
			exits, err := l.Start(procs(1), lease)
			require.NoError(t, err)
			child, grandchild := readPid(t, pidfile), readPid(t, pidfile+".grandchild")

			require.NoError(t, syscall.Kill(guardOf(t, os.Getpid()), syscall.SIGKILL))
			e := wait(t, exits)
			assert.Equal(t, 137, e.Code)
			assert.Equal(t, "the process guard died", e.Message)
			for _, pid := range []int{child, grandchild} {
				require.Eventually(t, func() bool { return !proctest.Alive(pid) }, 10*time.Second, 5*time.Millisecond,
					"process %d outlived its guard", pid)
			}
			_, err = l.Start(procs(1), lease)
			require.NoError(t, err, "a new guard takes over")
		})
	}
}

// The fence must not wait for a start that a frozen guard never answers:
// the guard may have forked the processes already.
func TestKillDoesNotWaitForAStartAFrozenGuardNeverAnswers(t *testing.T) {
	l, _ := newLauncher(t, "auto", "sleep")
	_, err := l.Start(procs(1), lease)
	require.NoError(t, err)
	require.NoError(t, l.Stop(t.Context(), time.Second))
	g := guardOf(t, os.Getpid())
	require.NoError(t, syscall.Kill(g, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(g, syscall.SIGCONT) })

	started := make(chan error, 1)
	go func() {
		_, err := l.Start(procs(1), lease)
		started <- err
	}()
	time.Sleep(100 * time.Millisecond) // the start is sent and waits
	killed := make(chan error, 1)
	go func() { killed <- l.Kill(t.Context()) }()
	select {
	case err := <-killed:
		require.NoError(t, err)
	case <-time.After(15 * time.Second): // a start waits 30 s for its answer
		t.Fatal("the fence waited for the frozen guard's start")
	}
	assert.Error(t, <-started, "the start's guard was killed")
}
