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

	"github.com/elastictraining/coordinator/internal/proctest"
	"github.com/elastictraining/coordinator/launcher"
)

// The test binary doubles as the child process: LAUNCHER_TEST_CHILD says
// what the child does.
func TestMain(m *testing.M) {
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
		waitForSignal()
	case "sleep":
		writePid()
		waitForSignal()
	case "stubborn":
		// Ignores SIGTERM, and leaves a grandchild in its process group.
		signal.Ignore(syscall.SIGTERM)
		grandchild := exec.Command(os.Args[0], "-test.run=^$")
		grandchild.Env = append(os.Environ(), "LAUNCHER_TEST_CHILD=sleep", "PIDFILE="+os.Getenv("PIDFILE")+".grandchild")
		if err := grandchild.Start(); err != nil {
			os.Exit(3)
		}
		writePid()
		select {}
	case "partial":
		fmt.Print("no newline at the end")
	case "host":
		// A launcher in a process of its own, for the Pdeathsig test.
		l, err := launcher.New(launcher.Config{Command: []string{os.Args[0], "-test.run=^$"},
			Env: append(os.Environ(), "LAUNCHER_TEST_CHILD=sleep")})
		if err != nil {
			os.Exit(4)
		}
		if _, err := l.Start(topology(1)); err != nil {
			os.Exit(5)
		}
		select {}
	}
	os.Exit(0)
}

func waitForSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	<-ch
	os.Exit(143)
}

func writePid() {
	if f := os.Getenv("PIDFILE"); f != "" {
		_ = os.WriteFile(f+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600)
		_ = os.Rename(f+".tmp", f)
	}
}

func topology(nproc int) launcher.Topology {
	t := launcher.Topology{JobID: "job", Generation: 3, Role: "worker", NodeRank: 1, NNodes: 2, GlobalRankBase: 2,
		WorldSize: 2 + nproc, Host: "10.0.0.2", MasterAddr: "10.0.0.1", MasterPort: 6000}
	for l := range nproc {
		t.Ports = append(t.Ports, 7000+l)
		t.TrainerEndpoints = append(t.TrainerEndpoints, fmt.Sprintf("10.0.0.2:%d", 7000+l))
	}
	return t
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

func newLauncher(t *testing.T, child string, extraEnv ...string) (*launcher.Launcher, *proctest.Buffer) {
	out := &proctest.Buffer{}
	l, err := launcher.New(launcher.Config{
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     append(append(os.Environ(), "LAUNCHER_TEST_CHILD="+child, "GORACE=atexit_sleep_ms=0"), extraEnv...),
		Stdout:  out, Stderr: out,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Stop(context.Background(), 0) })
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
	l, out := newLauncher(t, "env", "KEEP=base", "RANK=overridden")
	exits, err := l.Start(topology(2))
	require.NoError(t, err)
	assert.Equal(t, 0, wait(t, exits).Code)

	lines := lines(out)
	for _, want := range []string{
		"[rank 2] RANK=2", "[rank 3] RANK=3", "[rank 2] LOCAL_RANK=0", "[rank 3] LOCAL_RANK=1",
		"[rank 2] WORLD_SIZE=4", "[rank 3] LOCAL_WORLD_SIZE=2", "[rank 2] MASTER_ADDR=10.0.0.1", "[rank 2] MASTER_PORT=6000",
		"[rank 3] PADDLE_TRAINER_ID=3", "[rank 3] PADDLE_CURRENT_ENDPOINT=10.0.0.2:7001",
		"[rank 2] PADDLE_TRAINER_ENDPOINTS=10.0.0.2:7000,10.0.0.2:7001", "[rank 2] MS_ROLE=MS_WORKER",
		"[rank 2] ELASTIC_GENERATION=3", "[rank 2] KEEP=base",
	} {
		assert.Contains(t, lines, want)
	}
}

func TestExitCodes(t *testing.T) {
	t.Run("a failing process stops the others and its code is reported", func(t *testing.T) {
		l, _ := newLauncher(t, "exit", "CODE=7")
		topo := topology(3)
		topo.GlobalRankBase = 0 // ranks 0, 1, 2: rank 1 fails, the others wait for SIGTERM
		exits, err := l.Start(topo)
		require.NoError(t, err)
		e := wait(t, exits)
		assert.Equal(t, 7, e.Code)
		assert.Equal(t, "rank 1: exited with code 7", e.Message)
		assert.Empty(t, l.Pids(), "the other ranks were stopped and reaped")
	})
	t.Run("every process exiting 0 is success", func(t *testing.T) {
		l, _ := newLauncher(t, "env")
		exits, err := l.Start(topology(3))
		require.NoError(t, err)
		assert.Equal(t, launcher.Exit{Code: 0, Message: "every process exited 0"}, wait(t, exits))
	})
	t.Run("a signal is reported as 128+signal", func(t *testing.T) {
		pidfile := filepath.Join(t.TempDir(), "pid")
		l, _ := newLauncher(t, "sleep", "PIDFILE="+pidfile)
		exits, err := l.Start(topology(1))
		require.NoError(t, err)
		pid := readPid(t, pidfile)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		e := wait(t, exits)
		assert.Equal(t, 137, e.Code)
		assert.Contains(t, e.Message, "killed by signal killed")
	})
}

func TestStopEscalatesToSIGKILLAndTakesTheGroup(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	l, _ := newLauncher(t, "stubborn", "PIDFILE="+pidfile)
	exits, err := l.Start(topology(1))
	require.NoError(t, err)
	child, grandchild := readPid(t, pidfile), readPid(t, pidfile+".grandchild")

	require.NoError(t, l.Stop(t.Context(), 200*time.Millisecond))
	assert.Equal(t, 137, wait(t, exits).Code, "SIGTERM was ignored, SIGKILL was not")
	assert.False(t, proctest.Alive(child), "the child is reaped")
	require.Eventually(t, func() bool { return !proctest.Alive(grandchild) }, 10*time.Second, 5*time.Millisecond,
		"the grandchild in the child's process group is gone too")
	require.NoError(t, l.Stop(t.Context(), 0), "stopping twice is harmless")

	_, err = l.Start(topology(1))
	require.NoError(t, err, "a new generation starts once the old one is reaped")
}

func TestChildrenDieWithTheLauncher(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), "LAUNCHER_TEST_CHILD=host", "PIDFILE="+pidfile)
	require.NoError(t, host.Start())
	child := readPid(t, pidfile)

	require.NoError(t, host.Process.Kill())
	_ = host.Wait()
	require.Eventually(t, func() bool { return !proctest.Alive(child) }, 10*time.Second, 5*time.Millisecond,
		"the child got Pdeathsig when its launcher died")
}

func TestPartialLastLineIsFlushed(t *testing.T) {
	l, out := newLauncher(t, "partial")
	exits, err := l.Start(topology(1))
	require.NoError(t, err)
	wait(t, exits)
	assert.Equal(t, []string{"[rank 2] no newline at the end"}, lines(out))
}

func TestStartFailsForAMissingCommand(t *testing.T) {
	l, err := launcher.New(launcher.Config{Command: []string{"/nonexistent/trainer"}})
	require.NoError(t, err)
	_, err = l.Start(topology(1))
	assert.ErrorContains(t, err, "start /nonexistent/trainer")
	_, err = launcher.New(launcher.Config{})
	assert.ErrorContains(t, err, "no command")
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
