package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// binary is the coordinator command, built once by TestMain.
var binary string

// repoRoot is the repository's top directory.
var repoRoot string

// releaseVersion is VERSION's, the binary's.
var releaseVersion string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "coordinator-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wd, _ := os.Getwd()
	repoRoot = filepath.Dir(wd)
	binary = filepath.Join(dir, "coordinator")
	// The version names the image serve injects outside a pod.
	release, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	releaseVersion = strings.TrimSpace(string(release))
	build := exec.Command("go", "build", "-o", binary, "./cmd/coordinator")
	build.Dir = repoRoot
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build coordinator:", err)
		os.Exit(1)
	}
	code := m.Run()
	stopCluster()
	os.RemoveAll(dir)
	os.Exit(code)
}

// localRun is a `coordinator run` process.
type localRun struct {
	t        *testing.T
	cmd      *exec.Cmd
	out      *proctest.Buffer
	done     chan struct{}
	code     int
	toyDir   string
	marker   string
	endpoint string
	client   *jobclient.Client
	cli      *clientv3.Client
}

// marker returns a value unique to a test, set in the environment of every
// process it starts, so that leftovers can be found.
func newMarker() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startRun runs `coordinator run args... -- command...` with the toy trainer's
// settings in env.
func startRun(t *testing.T, args []string, command []string, env ...string) *localRun {
	t.Helper()
	return startRunIn(t, repoRoot, args, command, env...)
}

// startRunIn is startRun in the working directory dir.
func startRunIn(t *testing.T, dir string, args []string, command []string, env ...string) *localRun {
	t.Helper()
	r := &localRun{t: t, out: &proctest.Buffer{}, done: make(chan struct{}), toyDir: t.TempDir(), marker: newMarker()}
	r.cmd = exec.Command(binary, append(append(append([]string{"run"}, args...), "--"), command...)...)
	r.cmd.Dir = dir
	r.cmd.Env = append(os.Environ(), patientDial, "TOY_DIR="+r.toyDir, "ELASTIC_TEST_MARK="+r.marker)
	r.cmd.Env = append(r.cmd.Env, env...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	require.NoError(t, r.cmd.Start())
	go func() {
		defer close(r.done)
		_ = r.cmd.Wait()
		r.code = r.cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.done:
			case <-time.After(30 * time.Second):
				_ = r.cmd.Process.Kill()
				<-r.done
			}
		}
		if t.Failed() {
			t.Logf("coordinator run output:\n%s", r.out.String())
		}
		r.assertNoLeftovers()
	})

	endpoint := regexp.MustCompile(`etcd serves on (\S+);`)
	require.Eventually(t, func() bool {
		m := endpoint.FindStringSubmatch(r.out.String())
		if m != nil {
			r.endpoint = m[1]
		}
		return m != nil
	}, 30*time.Second, 5*time.Millisecond, "run never printed its etcd endpoint:\n%s", r.out)
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: []string{r.endpoint}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	r.cli, r.client = cli, jobclient.New(cli, membership.DefaultKeys())
	return r
}

// wait waits for run to exit and returns its exit code.
func (r *localRun) wait() int {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(90 * time.Second):
		r.t.Fatalf("run did not exit:\n%s", r.out)
	}
	return r.code
}

// status waits until the job's status satisfies ok.
func (r *localRun) status(job, what string, ok func(membership.Status) bool) membership.Status {
	r.t.Helper()
	var last membership.Status
	require.Eventually(r.t, func() bool {
		ctx, cancel := context.WithTimeout(r.t.Context(), 5*time.Second)
		defer cancel()
		s, err := r.client.Status(ctx, job)
		last = s
		return err == nil && ok(s)
	}, 60*time.Second, 10*time.Millisecond, "job %s never %s; last status %+v", job, what, &last)
	return last
}

// start is one line of the toy trainer's start log.
type start struct {
	gen, rank, world, step, pid int
}

var startLine = regexp.MustCompile(`^gen=(\d+) rank=(\d+) world=(\d+) step=(\d+) pid=(\d+)$`)

// starts reads the toy trainer's start log.
func (r *localRun) starts() []start {
	data, _ := os.ReadFile(filepath.Join(r.toyDir, "starts.log"))
	var out []start
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		m := startLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var n [5]int
		for i := range n {
			n[i], _ = strconv.Atoi(m[i+1])
		}
		out = append(out, start{gen: n[0], rank: n[1], world: n[2], step: n[3], pid: n[4]})
	}
	return out
}

// startsOf waits until generation gen has started world trainers, and
// returns them by rank.
func (r *localRun) startsOf(gen, world int) map[int]start {
	r.t.Helper()
	var got map[int]start
	require.Eventually(r.t, func() bool {
		got = map[int]start{}
		for _, s := range r.starts() {
			if s.gen == gen {
				got[s.rank] = s
			}
		}
		return len(got) == world
	}, 60*time.Second, 10*time.Millisecond, "generation %d never started %d trainers; starts %+v", gen, world, r.starts())
	return got
}

// sidecarPid finds the sidecar process of a node by its command line.
func (r *localRun) sidecarPid(node string) int {
	r.t.Helper()
	for _, p := range processesWithMarker(r.marker) {
		args := p.Args
		for i := 0; i+1 < len(args); i++ {
			if len(args) > 1 && args[1] == "sidecar" && args[i] == "--node-id" && args[i+1] == node {
				return p.Pid
			}
		}
	}
	r.t.Fatalf("no sidecar process for node %s", node)
	return 0
}

// assertNoLeftovers checks that no process of this run is alive.
func (r *localRun) assertNoLeftovers() {
	r.t.Helper()
	var left []proctest.Process
	require.Eventually(r.t, func() bool {
		left = processesWithMarker(r.marker)
		return len(left) == 0
	}, 20*time.Second, 20*time.Millisecond, "processes left behind: %+v", &left)
}

// processesWithMarker lists the live processes of a test: those whose
// environment holds its marker.
func processesWithMarker(marker string) []proctest.Process {
	return proctest.Marked("ELASTIC_TEST_MARK=" + marker)
}

// cli runs the coordinator binary and returns its exit code and output.
// patientDial is in the environment of every process the tests start: on
// a loaded two-core machine, with the tests' processes all at once, etcd can
// take longer than the 5 s default to answer a new client.
const patientDial = "ELASTIC_DIAL_TIMEOUT=30s"

func cli(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(append(os.Environ(), patientDial), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// readInt reads the toy trainer's checkpoint of a rank.
func readInt(dir string, rank int) (int, error) {
	data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.step", rank)))
	if err != nil {
		return 0, err
	}
	step, _, _ := strings.Cut(strings.TrimSpace(string(data)), " ") // "STEP GENERATION"
	return strconv.Atoi(step)
}
