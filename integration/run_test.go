package integration

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

var toy = []string{"testdata/toytrainer.sh"}

func TestKilledTrainerRestartsEveryNodeFromItsCheckpoint(t *testing.T) {
	t.Parallel()
	r := startRun(t, []string{"--np", "2", "--job", "kill"}, toy, "TOY_STEPS=30", "TOY_INTERVAL=0.1")
	first := r.startsOf(1, 2)
	r.status("kill", "ran a few steps", func(membership.Status) bool {
		return len(r.starts()) == 2 && stepOf(t, r, 1) >= 3
	})

	require.NoError(t, syscall.Kill(first[1].pid, syscall.SIGKILL))
	second := r.startsOf(2, 2)
	for rank, s := range second {
		assert.Equal(t, 2, s.world)
		assert.Greater(t, s.step, 0, "rank %d resumed from its checkpoint", rank)
		assert.NotEqual(t, first[rank].pid, s.pid, "rank %d runs a new process", rank)
	}
	st := r.status("kill", "Running generation 2", func(s membership.Status) bool {
		return s.Phase == membership.JobRunning && s.Generation == 2
	})
	assert.Equal(t, 1, st.Restarts, "a failed trainer spends the restart budget")
	assert.Equal(t, 0, r.wait(), "the job still succeeds")
	assert.Contains(t, r.out.String(), "(worker rank 1) failed with exit code 137")
}

func TestKilledSidecarNodeReturnsAndTrainingResumes(t *testing.T) {
	t.Parallel()
	r := startRun(t, []string{"--np", "2", "--job", "crash", "--ttl", "2s"}, toy, "TOY_STEPS=40", "TOY_INTERVAL=0.1")
	first := r.startsOf(1, 2)
	r.status("crash", "ran a few steps", func(membership.Status) bool { return stepOf(t, r, 0) >= 3 })

	require.NoError(t, syscall.Kill(r.sidecarPid("crash-1"), syscall.SIGKILL))
	second := r.startsOf(2, 2)
	assert.False(t, proctest.Alive(first[1].pid), "the trainer died with its sidecar")
	for rank, s := range second {
		assert.Greater(t, s.step, 0, "rank %d resumed", rank)
	}
	st := r.status("crash", "Running generation 2", func(s membership.Status) bool {
		return s.Phase == membership.JobRunning && s.Generation == 2
	})
	assert.Equal(t, 0, st.Restarts, "a node that comes back is a membership change")
	assert.Contains(t, r.out.String(), "node crash-1 exited (signal: killed); starting it again")
	assert.Equal(t, 0, r.wait())
}

func TestScaleFromAnotherTerminal(t *testing.T) {
	t.Parallel()
	r := startRun(t, []string{"--np", "2", "--job", "elastic"}, toy, "TOY_STEPS=60", "TOY_INTERVAL=0.1")
	r.startsOf(1, 2)

	for _, np := range []string{"3", "2"} {
		code, stdout, stderr := cli(t, nil, "scale", "--etcd-endpoints", r.endpoint, "--job", "elastic", "--np", np, "--wait")
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, stdout, "job elastic runs at np "+np+": generation")
	}
	r.startsOf(3, 2)
	var worlds []int
	for _, s := range r.starts() {
		if s.rank == 0 {
			worlds = append(worlds, s.world)
		}
	}
	assert.Equal(t, []int{2, 3, 2}, worlds, "the world sizes rank 0 was started with")

	code, stdout, _ := cli(t, nil, "status", "--etcd-endpoints", r.endpoint, "--job", "elastic")
	require.Equal(t, 0, code)
	assert.Regexp(t, `elastic-\d\s+worker\s+0\s`, stdout)
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 143, r.wait(), "a run stopped by SIGTERM exits 128+15, as a shell reports it")
	assert.Regexp(t, `coordinator run: stopping \d nodes?: their trainers get the 10s grace period to exit; interrupt again to kill them now`, r.out.String())
}

func TestJobResults(t *testing.T) {
	t.Run("success exits 0", func(t *testing.T) {
		t.Parallel()
		r := startRun(t, []string{"--np", "2", "--job", "ok"}, toy, "TOY_STEPS=3", "TOY_INTERVAL=0.05")
		assert.Equal(t, 0, r.wait())
		assert.Contains(t, r.out.String(), "job ok succeeded")
	})
	t.Run("failure exits with the trainer's code", func(t *testing.T) {
		t.Parallel()
		r := startRun(t, []string{"--np", "2", "--job", "bad", "--fault-tolerance-level", "0"}, toy,
			"TOY_STEPS=10", "TOY_INTERVAL=0.05", "TOY_FAIL_AT=2")
		assert.Equal(t, 3, r.wait())
		assert.Contains(t, r.out.String(), "job bad failed with exit code 3")
	})
	t.Run("a failure within the budget restarts and succeeds", func(t *testing.T) {
		t.Parallel()
		r := startRun(t, []string{"--np", "2", "--job", "retry", "--max-restarts", "1"}, toy,
			"TOY_STEPS=5", "TOY_INTERVAL=0.05", "TOY_FAIL_AT=2")
		assert.Equal(t, 0, r.wait())
		assert.Len(t, r.startsOf(2, 2), 2)
	})
}

func TestBadInputThroughTheBinary(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"run", "--np", "5:2", "--", "true"}, 2, "minimum 5 is greater than maximum 2"},
		{[]string{"run", "--np", "0", "--", "true"}, 2, "need at least 1"},
		{[]string{"run", "--np", "2", "--job", strings.Repeat("x_", 130), "--", "true"}, 2, "--job: invalid job id: longer than 253 characters"},
		{[]string{"run", "--np", "2", "--"}, 2, "no training command"},
		{[]string{"run", "--np", "2", "--preload", "torch,a-b", "--", "python3", "t.py"}, 2, `--preload: "a-b" is not a Python module name`},
		{[]string{"sidecar", "--job", "j", "--preload", "1x", "--", "python3", "t.py"}, 2, `--preload: "1x" is not a Python module name`},
		{[]string{"run", "--np", "2", "--hang-timeout", "-1s", "--", "true"}, 2, "--hang-timeout -1s: must not be negative (0 turns it off)"},
		{[]string{"run", "--np", "2", "--startup-timeout", "abc", "--", "true"}, 2, `--startup-timeout "abc": want a duration such as 30s or 2m, 0 (off) or auto`},
		{[]string{"run", "--np", "2", "--max-hang-restarts", "-1", "--", "true"}, 2, "--max-hang-restarts -1: must not be negative"},
		{[]string{"run", "--np", "2", "--spares", "-1", "--", "true"}, 2, "--spares -1: must not be negative"},
		{[]string{"run", "--np", "1:2", "--spares", "3", "--", "true"}, 2, "--spares 3: at most np's maximum, 2"},
		{[]string{"run", "--np", "2", "--spares", "abc", "--", "true"}, 2, `--spares "abc": want a whole number such as 1`},
		{[]string{"run", "--np", "2", "--hang-timeout", "1ms", "--", "true"}, 2, "--hang-timeout 1ms: want 500ms or more, the least the hang watch honours"},
		{[]string{"status", "--job", "j", "--dial-timeout", "nonsense"}, 2, `--dial-timeout "nonsense": want a duration such as 30s or 2m`},
		{[]string{"sidecar", "--job", "j", "--hang-timeout", "5", "--", "true"}, 2, `--hang-timeout "5": want a duration such as 30s or 2m, 0 (off) or auto`},
		{[]string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--dial-timeout", "300ms", "--job", "j", "--", "true"}, 1, "unreachable"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := cli(t, nil, tc.args...)
			assert.Equal(t, tc.code, code)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, tc.says)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		})
	}
}

// stepOf is the last step a rank checkpointed.
func stepOf(t *testing.T, r *localRun, rank int) int {
	t.Helper()
	s, _ := readInt(r.toyDir, rank)
	return s
}

func TestSidecarTakesPaddlePaddlesVariables(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	background(t, nil, "serve", "--etcd-endpoints", srv.Endpoint(), "--listen-metrics", "127.0.0.1:0")
	hostPort := strings.TrimPrefix(srv.Endpoint(), "http://")
	sidecar := background(t, []string{
		"PADDLE_ELASTIC_SERVER=" + hostPort, "PADDLE_ELASTIC_JOB_ID=paddle", "PADDLE_ELASTIC_NP=1",
		"PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL=0", "PADDLE_ELASTIC_TIMEOUT=60", "POD_IP=127.0.0.2", "POD_NAME=paddle-0",
		"TOY_DIR=" + t.TempDir(), "TOY_STEPS=20", "TOY_INTERVAL=0.05",
	}, "sidecar", "--port", freePort(t), "--master-port", freePort(t), "--", "testdata/toytrainer.sh")

	client := jobclient.New(srv.Client(t), membership.DefaultKeys())
	require.Eventually(t, func() bool {
		nodes, err := client.Nodes(t.Context(), "paddle")
		return err == nil && len(nodes) == 1 && nodes[0].ID == "paddle-0" && nodes[0].Host == "127.0.0.2" && nodes[0].Pod == "paddle-0"
	}, 30*time.Second, 10*time.Millisecond, "the node registered with POD_NAME and POD_IP")
	assert.Equal(t, 0, sidecar.wait(t))
	p, err := client.Plan(t.Context(), "paddle")
	require.NoError(t, err)
	assert.Equal(t, membership.JobSucceeded, p.Result)
	spec, err := membership.DecodeSpec(mustGet(t, srv, membership.DefaultKeys().Spec("paddle")))
	require.NoError(t, err)
	assert.Equal(t, membership.NP{Min: 1, Max: 1}, spec.NP)
	assert.Equal(t, 0, spec.FaultTolerance, "PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL, spelled as PaddlePaddle spells it")
}

func mustGet(t *testing.T, srv *etcdtest.Server, key string) []byte {
	resp, err := srv.Client(t).Get(t.Context(), key)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	return resp.Kvs[0].Value
}

func TestStatusWatchFollowsTheJobToItsEnd(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	background(t, nil, "serve", "--etcd-endpoints", srv.Endpoint(), "--listen-metrics", "127.0.0.1:0")
	code, _, stderr := cli(t, nil, "scale", "--etcd-endpoints", srv.Endpoint(), "--job", "watched", "--np", "1", "--create")
	require.Equal(t, 0, code, stderr)
	watch := background(t, nil, "status", "--etcd-endpoints", srv.Endpoint(), "--job", "watched", "--watch", "-o", "json")
	background(t, []string{"TOY_DIR=" + t.TempDir(), "TOY_STEPS=5", "TOY_INTERVAL=0.1"},
		"sidecar", "--etcd-endpoints", srv.Endpoint(), "--job", "watched", "--host", "127.0.0.1", "--", "testdata/toytrainer.sh")

	assert.Equal(t, 0, watch.wait(t), "the watch ends with the job")
	var phases []string
	for _, line := range strings.Split(strings.TrimSpace(watch.out.String()), "\n") {
		var v struct {
			Phase string           `json:"phase"`
			NP    map[string]int   `json:"np"`
			Nodes []map[string]any `json:"nodes"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &v), "one JSON object per line, np a {min,max}: %q", line)
		assert.Equal(t, map[string]int{"min": 1, "max": 1}, v.NP)
		assert.Contains(t, line, `"nodes":[`, "nodes in every line")
		if len(phases) == 0 || phases[len(phases)-1] != v.Phase {
			phases = append(phases, v.Phase)
		}
	}
	assert.Equal(t, "Succeeded", phases[len(phases)-1])
	assert.Contains(t, phases, "Running")
}
