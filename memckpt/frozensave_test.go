package memckpt

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/launcher"
	"github.com/elastictraining/coordinator/membership"
)

// The frozen host's trainer and what it runs under.
const (
	frozenGeneration = 3
	frozenLease      = 7
	// frozenStep is the trainer's step, a save at the end of each: its
	// save interval.
	frozenStep = 100 * time.Millisecond
)

// frozenTrainer saves its step, the CLOCK_MONOTONIC time it was made at and
// 64 KiB of weights at the end of every step of MEMCKPT_STEP seconds, with
// a path, and logs each step made to MEMCKPT_DIR/steps ("step time", or
// "step time error" when save raised), until it is killed.
const frozenTrainer = `
import os, time
import elastic
d = os.environ["MEMCKPT_DIR"]
step_time = float(os.environ["MEMCKPT_STEP"])
path = os.path.join(d, "ckpt", "state.bin")
with open(os.path.join(d, "pid.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(d, "pid.tmp"), os.path.join(d, "pid"))
log = open(os.path.join(d, "steps"), "a", buffering=1)
step = 0
while True:
    t = time.monotonic_ns()
    try:
        elastic.save({"step": step, "t": t, "weights": bytes(1 << 16)}, path)
        log.write("%d %d\n" % (step, t))
    except elastic.CheckpointError as e:
        log.write("%d %d error\n" % (step, t))
    step += 1
    time.sleep(step_time)
`

// hostNode is the frozen host's node: it runs generation frozenGeneration
// under a lease it holds until a time.
type hostNode struct {
	mu    sync.Mutex
	until time.Time
}

func (n *hostNode) hold(until time.Time) {
	n.mu.Lock()
	n.until = until
	n.mu.Unlock()
}

func (n *hostNode) Holds() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !time.Now().Before(n.until) {
		return fmt.Errorf("the lease deadline has passed")
	}
	return nil
}

func (n *hostNode) Fence(generation int64) error {
	if generation != frozenGeneration {
		return fmt.Errorf("generation %d is over", generation)
	}
	return n.Holds()
}

func (n *hostNode) Members() (int64, []membership.Member) { return frozenGeneration, members("a") }

// frozenHost is a node's sidecar in a process of its own, so that a test
// can freeze it: a checkpoint store for the etcd at MEMCKPT_ETCD, and a
// launcher whose guard (this binary) runs frozenTrainer. Once the trainer
// has saved, it sets the deadline MEMCKPT_DEADLINE_MS ahead, for the
// launcher (its guard and the trainer's fence watchdog) and the store's
// fence alike, writes it to MEMCKPT_DIR/deadline (CLOCK_MONOTONIC ns), says
// "ready" and answers the lines of its standard input:
//
//	renew: the node holds a lease again, as after registering anew; the
//	       store writes its newest copy to disk; "written"
//	load:  a Python process below this one, as the next generation's
//	       trainer, loads the checkpoint and prints its step and time
func frozenHost() {
	if err := runFrozenHost(); err != nil {
		fmt.Fprintln(os.Stderr, "frozen host:", err)
		os.Exit(1)
	}
}

func runFrozenHost() error {
	ctx := context.Background()
	dir := os.Getenv("MEMCKPT_DIR")
	ms, err := strconv.Atoi(os.Getenv("MEMCKPT_DEADLINE_MS"))
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{os.Getenv("MEMCKPT_ETCD")}, DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	node := &hostNode{until: time.Now().Add(time.Hour)}
	// The store writes to disk only when told: what the file holds after
	// the freeze is the trainer's.
	s, err := New(ctx, Config{Job: "job", NodeID: "a", Client: cli, Listen: "127.0.0.1:0", Host: "127.0.0.1",
		ModuleDir: filepath.Join(dir, "module"), DiskInterval: time.Hour})
	if err != nil {
		return err
	}
	s.Start(node)
	defer s.Close()
	env := pyEnv(s.PythonPath(""), append(s.TrainerEnv(), "MEMCKPT_DIR="+dir,
		"MEMCKPT_STEP="+strconv.FormatFloat(frozenStep.Seconds(), 'f', -1, 64))...)
	// Standard output answers the test; the trainer's goes to standard
	// error.
	l, err := launcher.New(launcher.Config{Command: []string{python, "-c", frozenTrainer}, Env: env,
		Stdout: os.Stderr, Stderr: os.Stderr, Guard: []string{os.Args[0], "guard", "--cgroup", "auto"}})
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.SetDeadline(frozenLease, node.until); err != nil {
		return err
	}
	procs := launcher.Procs{Generation: frozenGeneration, Role: "worker", WorldSize: 1,
		Env: [][]string{{"ELASTIC_JOB_ID=job", "ELASTIC_GENERATION=" + strconv.Itoa(frozenGeneration), "RANK=0"}}}
	if _, err := l.Start(procs, frozenLease); err != nil {
		return err
	}
	// From the trainer's first step, however long a loaded machine takes
	// to start it.
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "steps")); err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			return fmt.Errorf("the trainer made no step")
		}
	}
	at := time.Now().Add(time.Duration(ms) * time.Millisecond)
	node.hold(at)
	if err := l.SetDeadline(frozenLease, at); err != nil {
		return err
	}
	// No earlier than the launcher's: the clock is read after time.Now,
	// whose monotonic reading at is measured against.
	now := time.Now()
	if err := os.WriteFile(filepath.Join(dir, "deadline"), []byte(strconv.FormatInt(guard.MonoNow()+int64(at.Sub(now)), 10)), 0o600); err != nil {
		return err
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "renew":
			node.hold(time.Now().Add(time.Hour))
			s.WriteDisk(ctx)
			fmt.Println("written")
		case "load":
			py := exec.Command(python, "-c", `
import os, elastic
state = elastic.load(os.path.join(os.environ["MEMCKPT_DIR"], "ckpt", "state.bin"))
print(state["step"], state["t"])
`)
			py.Env = env
			out, err := py.CombinedOutput()
			if err != nil {
				return fmt.Errorf("load: %v: %s", err, out)
			}
			fmt.Println(strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// step is a line of frozenTrainer's log.
type step struct {
	n       int
	at      int64 // CLOCK_MONOTONIC ns
	refused bool  // save raised
}

func frozenSteps(t *testing.T, dir string) []step {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "steps"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []step
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if !strings.HasSuffix(line, "\n") || len(f) < 2 {
			break
		}
		n, err := strconv.Atoi(f[0])
		require.NoError(t, err, line)
		at, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err, line)
		out = append(out, step{n: n, at: at, refused: len(f) > 2})
	}
	return out
}

// stopProcesses stops the processes and returns the CLOCK_MONOTONIC time by
// which all of them are stopped; they are continued when the test ends.
func stopProcesses(t *testing.T, pids ...int) int64 {
	t.Helper()
	for _, pid := range pids {
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	}
	for _, pid := range pids {
		require.Eventually(t, func() bool { return processState(pid) == "T" }, 10*time.Second, time.Millisecond)
	}
	return guard.MonoNow()
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

// guardBelow is the guard process below pid.
func guardBelow(t *testing.T, pid int) int {
	t.Helper()
	for _, p := range guard.Descendants(pid) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 && args[1] == "guard" {
			return p
		}
	}
	t.Fatal("no guard below the host")
	return 0
}

// A node's sidecar (its checkpoint store) and its guard frozen together
// while the trainer runs on, saving every step with a path: the saves the
// sidecar does not take land in the file through the trainer's fence
// watchdog until the deadline, where the watchdog kills the trainer, and
// none made after the deadline does. The next generation loads one of the
// last steps the trainer made, not the one before the freeze; the sidecar,
// thawed and holding a lease again, does not write its older copy over the
// file.
func TestSavesLandOnDiskWhileTheSidecarAndGuardAreFrozen(t *testing.T) {
	requirePython(t)
	srv := etcdtest.Start(t)
	dir := t.TempDir()
	self, err := os.Executable()
	require.NoError(t, err)
	host := exec.Command(self, "-test.run=^$")
	host.Env = append(os.Environ(), "MEMCKPT_HELPER=frozen-host", "MEMCKPT_ETCD="+srv.Endpoint(), "MEMCKPT_DIR="+dir,
		"MEMCKPT_DEADLINE_MS=5000")
	host.Stderr = os.Stderr
	stdin, err := host.StdinPipe()
	require.NoError(t, err)
	stdout, err := host.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, host.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(host.Process.Pid, syscall.SIGCONT)
		_ = host.Process.Kill()
		_ = host.Wait()
	})
	answers := bufio.NewReader(stdout)
	ask := func(command string) string {
		t.Helper()
		if command != "" {
			_, err := io.WriteString(stdin, command+"\n")
			require.NoError(t, err)
		}
		line, err := answers.ReadString('\n')
		require.NoError(t, err, "the host did not answer %q", command)
		return strings.TrimSpace(line)
	}
	require.Equal(t, "ready", ask(""))
	deadline := readMonoFile(t, filepath.Join(dir, "deadline"))
	trainerPid, err := strconv.Atoi(strings.TrimSpace(string(mustReadFile(t, filepath.Join(dir, "pid")))))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(frozenSteps(t, dir)) >= 5 }, 30*time.Second, 5*time.Millisecond,
		"the trainer made no steps")

	frozenAt := stopProcesses(t, host.Process.Pid, guardBelow(t, host.Process.Pid))
	require.Less(t, frozenAt, deadline-int64(2500*time.Millisecond), "the supervisors froze late: a machine too slow for this test")

	// What lands in the file while the supervisors are frozen.
	path := filepath.Join(dir, "ckpt", "state.bin")
	landed := map[int64]bool{}
	require.Eventually(t, func() bool {
		if m, err := readFileMeta(path); err == nil {
			landed[m.Seq] = true
		}
		return !proctest.Alive(trainerPid)
	}, 30*time.Second, 2*time.Millisecond, "the trainer outlived the deadline of its frozen sidecar and guard")

	steps := frozenSteps(t, dir)
	require.NotEmpty(t, steps)
	last := steps[len(steps)-1]
	var beforeFreeze step
	for _, s := range steps {
		if s.at < frozenAt {
			beforeFreeze = s
		}
	}
	require.NoError(t, syscall.Kill(host.Process.Pid, syscall.SIGCONT))
	require.NoError(t, syscall.Kill(guardBelow(t, host.Process.Pid), syscall.SIGCONT))
	require.Equal(t, "written", ask("renew"))
	loaded := strings.Fields(ask("load"))
	require.Len(t, loaded, 2)
	loadedStep, err := strconv.Atoi(loaded[0])
	require.NoError(t, err)
	loadedAt, err := strconv.ParseInt(loaded[1], 10, 64)
	require.NoError(t, err)

	t.Logf("steps of %v: the last before the freeze %d, the last made %d (%v before the deadline); loaded %d: %d steps lost; "+
		"%d saves landed in the file while frozen",
		frozenStep, beforeFreeze.n, last.n, time.Duration(deadline-last.at), loadedStep, last.n-loadedStep, len(landed))
	assert.Greater(t, len(landed), 1, "saves did not keep landing in the file while the sidecar and the guard were frozen")
	assert.Less(t, loadedAt, deadline, "a save made after the deadline landed")
	// The save being written and the one waiting when the trainer was
	// killed are lost; every earlier one landed.
	assert.LessOrEqual(t, last.n-loadedStep, 2, "the next generation resumes %d steps back", last.n-loadedStep)
}

func readMonoFile(t *testing.T, file string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(strings.TrimSpace(string(mustReadFile(t, file))), 10, 64)
	require.NoError(t, err)
	return v
}

func mustReadFile(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	return data
}
