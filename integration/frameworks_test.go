package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/pythons"
	"github.com/elastictraining/coordinator/trainerenv"
)

// The framework stand-ins (testdata/frameworks) read the variables as
// MindSpore's and PaddlePaddle's own code does, fail as it fails, and
// write down what each process was given.
var (
	standInPython  = "/usr/bin/python3"
	mindsporeStand = []string{standInPython, "testdata/frameworks/mindspore_standin.py"}
	paddleTrainer  = "testdata/frameworks/paddle_trainer.py"
)

// standIn is what a stand-in process wrote down.
type standIn struct {
	file   string
	Env    map[string]string `json:"env"`
	Pid    int               `json:"pid"`
	Rank   *int              `json:"rank"`
	NodeID string            `json:"node_id"`
	World  int               `json:"world"`
	Device *int              `json:"device"`
}

// standIns reads the records of kind (mindspore, paddle, paddlelaunch) of
// generation gen in dir.
func standIns(dir, kind string, gen int) []standIn {
	files, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("%s-*-gen%d-pid*.json", kind, gen)))
	var out []standIn
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := standIn{file: filepath.Base(f)}
		if json.Unmarshal(data, &s) == nil {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].file < out[j].file })
	return out
}

// awaitStandIns waits for n records of kind in generation gen.
func awaitStandIns(t *testing.T, r *localRun, dir, kind string, gen, n int) []standIn {
	t.Helper()
	var got []standIn
	require.Eventually(t, func() bool {
		got = standIns(dir, kind, gen)
		return len(got) == n
	}, 60*time.Second, 20*time.Millisecond, "generation %d never had %d %s processes (%d)\n%s", gen, n, kind, len(got), r.out)
	return got
}

// byRole splits records into the scheduler's and the workers' by rank.
func byRole(t *testing.T, records []standIn) (sched standIn, workers map[int]standIn) {
	workers = map[int]standIn{}
	for _, s := range records {
		if s.Env["MS_ROLE"] == "MS_SCHED" {
			sched = s
			continue
		}
		require.NotNil(t, s.Rank, s.file)
		workers[*s.Rank] = s
	}
	return sched, workers
}

// TestAMindSporeJobUnderRun runs a MindSpore job as its users write it
// for msrun, with `run --schedulers 1`: every generation has a scheduler
// of its own, and every worker's rank as MindSpore's scheduler assigns it
// (from the numeric MS_NODE_ID) is RANK_ID, the job's rank; MS_SCHED_HOST
// is an IP address. Through a killed worker and a scale to 3.
func TestAMindSporeJobUnderRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := startRun(t, []string{"--np", "2", "--schedulers", "1", "--job", "ms"}, mindsporeStand, "STANDIN_DIR="+dir)
	check := func(gen, workers int) (standIn, map[int]standIn) {
		t.Helper()
		sched, ws := byRole(t, awaitStandIns(t, r, dir, "mindspore", gen, workers+1))
		require.Len(t, ws, workers, "every worker has its own rank")
		assert.NotContains(t, sched.Env, "MS_NODE_ID", "msrun gives the scheduler no node id")
		assert.Equal(t, "0", sched.Env["RANK_ID"])
		for rank, w := range ws {
			assert.Equal(t, strconv.Itoa(rank), w.NodeID, "MS_NODE_ID is the rank")
			assert.Equal(t, strconv.Itoa(rank), w.Env["RANK_ID"])
			assert.Equal(t, strconv.Itoa(workers), w.Env["RANK_SIZE"])
			assert.Equal(t, strconv.Itoa(workers), w.Env["MS_WORKER_NUM"])
			assert.Equal(t, "0", w.Env["DEVICE_ID"], "one process a node: local index 0")
			assert.NotNil(t, net.ParseIP(w.Env["MS_SCHED_HOST"]), "an IP address: %q", w.Env["MS_SCHED_HOST"])
			assert.Equal(t, sched.Env["MS_SCHED_PORT"], w.Env["MS_SCHED_PORT"])
		}
		return sched, ws
	}
	sched1, workers1 := check(1, 2)

	require.NoError(t, syscall.Kill(workers1[1].Pid, syscall.SIGKILL))
	sched2, _ := check(2, 2)
	assert.NotEqual(t, sched1.Pid, sched2.Pid, "a fresh scheduler for the new generation")

	code, stdout, stderr := cli(t, nil, "scale", "--etcd-endpoints", r.endpoint, "--job", "ms", "--np", "3", "--wait", "--timeout", "60s")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "job ms runs at np 3: generation 3, 3 worker nodes", "np counts workers, not the scheduler")
	sched3, _ := check(3, 3)
	assert.NotEqual(t, sched2.Pid, sched3.Pid)

	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 143, r.wait())
}

// TestAMindSporeJobWithServersUnderRun: MindSpore's scheduler keeps every
// role's nodes under their ids alone, so a server's id must not be a
// worker's: the job registers whole, and each process's rank as the
// scheduler assigns it is RANK_ID.
func TestAMindSporeJobWithServersUnderRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// --framework mindspore wants MindSpore in the command's Python: the
	// venv's, which runs the stand-in here.
	r := startRun(t, []string{"--np", "2", "--ps", "1", "--framework", "mindspore", "--job", "msps"}, []string{pythons.MindSpore(t), mindsporeStand[1]},
		"STANDIN_DIR="+dir, "STANDIN_SECONDS=1")
	assert.Equal(t, 0, r.wait(), "every node registered and finished")
	records := standIns(dir, "mindspore", 1)
	require.Len(t, records, 4, "a scheduler, a server and two workers")
	ids := map[string]bool{}
	for _, s := range records {
		if s.Env["MS_ROLE"] == "MS_SCHED" {
			continue
		}
		require.NotNil(t, s.Rank, s.file)
		assert.Equal(t, strconv.Itoa(*s.Rank), s.Env["RANK_ID"], s.file)
		assert.False(t, ids[s.NodeID], "node id %s twice", s.NodeID)
		ids[s.NodeID] = true
	}
}

// TestPaddlesLauncherAsTheCommand runs `python -m paddle.distributed.launch
// --nproc_per_node 2 train_fleet.py`, as the seed's resnet PaddleJob does,
// with PaddlePaddle's elastic variables set as a pod spec written for
// Paddle's elastic launcher sets them. The sidecars run the launcher once
// per node inside each generation: it sees none of them (else it would
// start an elastic manager of its own), its master is the generation's,
// and the processes it starts have the generation's ranks and the node's
// reserved ports. Through a killed trainer and a scale to 3.
func TestPaddlesLauncherAsTheCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := startRun(t, nil, []string{standInPython, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "train_fleet.py"},
		"STANDIN_DIR="+dir, "PYTHONPATH=testdata/frameworks/python", "STANDIN_TRAINER="+paddleTrainer,
		"PADDLE_ELASTIC_SERVER=127.0.0.1:2379", "PADDLE_ELASTIC_JOB_ID=resnet", "PADDLE_ELASTIC_NP=2")
	check := func(gen, nodes int) map[int]standIn {
		t.Helper()
		launchers := awaitStandIns(t, r, dir, "paddlelaunch", gen, nodes)
		var masters []string
		for _, l := range launchers {
			for _, v := range []string{"PADDLE_ELASTIC_SERVER", "PADDLE_ELASTIC_JOB_ID", "PADDLE_ELASTIC_NP", "PADDLE_TRAINER_ENDPOINTS", "PADDLE_TRAINER_ID"} {
				assert.NotContains(t, l.Env, v, "the launcher is not told %s", v)
			}
			assert.Equal(t, strconv.Itoa(nodes), l.Env["PADDLE_NNODES"])
			assert.Equal(t, "2", l.Env["PADDLE_NPROC_PER_NODE"], "the launcher's own flag, which the sidecars took")
			masters = append(masters, l.Env["PADDLE_MASTER"])
		}
		assert.Len(t, slices.Compact(masters), 1, "one master: %q", masters)
		trainers := map[int]standIn{}
		for _, s := range awaitStandIns(t, r, dir, "paddle", gen, 2*nodes) {
			trainers[*s.Rank] = s
			assert.Equal(t, 2*nodes, s.World)
			assert.Equal(t, "gloo", s.Env["PADDLE_DISTRI_BACKEND"], "a CPU node")
		}
		require.Len(t, trainers, 2*nodes, "ranks 0..%d", 2*nodes-1)
		return trainers
	}
	first := check(1, 2)
	// The processes' endpoints are the nodes' reserved ports: a node's
	// first process at its first port.
	for rank := range 4 {
		_, port, _ := net.SplitHostPort(first[rank].Env["PADDLE_CURRENT_ENDPOINT"])
		fixed, _ := strconv.Atoi(first[rank].Env["FLAGS_FIXED_PORT"])
		node, _ := strconv.Atoi(first[rank].Env["PADDLE_RANK"])
		assert.Equal(t, strconv.Itoa(fixed+node+rank%2), port, "rank %d", rank)
	}

	require.NoError(t, syscall.Kill(first[3].Pid, syscall.SIGKILL))
	check(2, 2)
	code, _, stderr := cli(t, nil, "scale", "--etcd-endpoints", r.endpoint, "--job", "resnet", "--np", "3", "--wait")
	require.Equal(t, 0, code, stderr)
	check(3, 3)
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 143, r.wait())
}

// TestPaddleGetsItsDevices: on a machine of four GPUs, two nodes of two
// processes each have a GPU of their own (a node sees its share as a
// machine would, CUDA_VISIBLE_DEVICES, and each process its own
// FLAGS_selected_gpus in it), which a CUDA build of Paddle needs; without
// devices, the backend is gloo.
func TestPaddleGetsItsDevices(t *testing.T) {
	t.Parallel()
	t.Run("gpus", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		r := startRun(t, []string{"--np", "2", "--nproc-per-node", "2", "--devices", "4", "--framework", "paddle", "--job", "gpus"},
			[]string{pythons.Paddle(t), paddleTrainer}, "STANDIN_DIR="+dir, "STANDIN_CUDA=1", "STANDIN_SECONDS=1")
		var physical []string
		for _, s := range awaitStandIns(t, r, dir, "paddle", 1, 4) {
			assert.NotContains(t, s.Env, "PADDLE_DISTRI_BACKEND", "nccl, Paddle's default with GPUs")
			require.NotNil(t, s.Device, s.file)
			visible := strings.Split(s.Env["CUDA_VISIBLE_DEVICES"], ",")
			physical = append(physical, visible[*s.Device])
			assert.Equal(t, s.Env["PADDLE_LOCAL_RANK"], s.Env["FLAGS_selected_gpus"], "process l of several: device l")
		}
		slices.Sort(physical)
		assert.Equal(t, []string{"0", "1", "2", "3"}, physical, "a GPU each")
		assert.Equal(t, 0, r.wait())
	})
	t.Run("cpu", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		r := startRun(t, []string{"--np", "2", "--devices", "none", "--framework", "paddle", "--job", "cpu"},
			[]string{pythons.Paddle(t), paddleTrainer}, "STANDIN_DIR="+dir, "STANDIN_CUDA=1", "STANDIN_SECONDS=1")
		for _, s := range awaitStandIns(t, r, dir, "paddle", 1, 2) {
			assert.Equal(t, "gloo", s.Env["PADDLE_DISTRI_BACKEND"])
			assert.NotContains(t, s.Env, "FLAGS_selected_gpus")
			assert.NotContains(t, s.Env, "RANK", "paddle's contract alone: no torchrun variable")
		}
		assert.Equal(t, 0, r.wait())
	})
}

// TestTheStandInsFailAsTheFrameworksDo gives the stand-ins what the
// product gave before it followed the frameworks' sources, and expects
// each to fail the way its framework does: a test through them can fail.
func TestTheStandInsFailAsTheFrameworksDo(t *testing.T) {
	t.Parallel()
	run := func(env []string, argv ...string) (int, string) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if err != nil {
			code = cmd.ProcessState.ExitCode()
		}
		return code, strings.TrimSpace(stderr.String())
	}
	port := freePort(t)
	code, msg := run([]string{"MS_ROLE=MS_WORKER", "MS_SCHED_HOST=localhost", "MS_SCHED_PORT=" + port, "MS_WORKER_NUM=1"}, mindsporeStand...)
	assert.Equal(t, 1, code)
	assert.Equal(t, "Parse ip failed, result: 0, url: localhost:"+port, msg, "MindSpore takes no host name")

	code, msg = run([]string{"STANDIN_CUDA=1", "PADDLE_TRAINER_ID=0", "PADDLE_TRAINERS_NUM=1", "PADDLE_CURRENT_ENDPOINT=127.0.0.1:1"}, standInPython, paddleTrainer)
	assert.Equal(t, 1, code)
	assert.Equal(t, "ValueError: paddle.distributed initialize error, environment variable FLAGS_selected_gpus is needed, but not set.", msg)

	code, msg = run([]string{"PYTHONPATH=testdata/frameworks/python", "PADDLE_ELASTIC_SERVER=127.0.0.1:2379", "PADDLE_ELASTIC_JOB_ID=j", "PADDLE_ELASTIC_NP=2"},
		standInPython, "-m", "paddle.distributed.launch", "train.py")
	assert.Equal(t, 1, code)
	assert.Contains(t, msg, "its own elastic manager would run on 127.0.0.1:2379")

	// Node ids that are not numbers: MindSpore ranks its nodes by host and
	// id compared as strings, so from 11 workers on worker-10 comes before
	// worker-2, and its rank is not the job's.
	schedPort := freePort(t)
	common := []string{"MS_SCHED_HOST=127.0.0.1", "MS_SCHED_PORT=" + schedPort, "MS_WORKER_NUM=11", "MS_TOPO_TIMEOUT=30", "STANDIN_SECONDS=0"}
	sched := exec.Command(mindsporeStand[0], mindsporeStand[1:]...)
	sched.Dir, sched.Env = repoRoot, append(append(os.Environ(), common...), "MS_ROLE=MS_SCHED")
	require.NoError(t, sched.Start())
	t.Cleanup(func() { _ = sched.Process.Kill(); _ = sched.Wait() })
	type result struct {
		code int
		msg  string
	}
	results := make(chan result, 11)
	for i := range 11 {
		go func() {
			code, msg := run(append(slices.Clone(common), "MS_ROLE=MS_WORKER", fmt.Sprintf("MS_NODE_ID=worker-%d", i), fmt.Sprintf("RANK_ID=%d", i)), mindsporeStand...)
			results <- result{code, msg}
		}()
	}
	var failed []string
	for range 11 {
		if r := <-results; r.code != 0 {
			failed = append(failed, r.msg)
		}
	}
	assert.Contains(t, failed, "get_rank() is 2 but RANK_ID is 10: MindSpore's rank is not the job's")
}

// envDumper is a trainer that writes its environment down once per
// generation, under its role and rank, and then waits.
var envDumper = []string{"/bin/sh", "-c",
	`f="$STANDIN_DIR/env-$ELASTIC_ROLE-$ELASTIC_RANK-gen$ELASTIC_GENERATION"; { env; echo "DUMPER_PID=$$"; } >"$f.tmp" && mv "$f.tmp" "$f" && exec sleep 600`}

// TestEveryRoleIsGivenTheTable runs jobs of every role on `run`, with and
// without a framework, and checks every process's environment at
// generation 1, after a killed process (2) and after a scale (3) against
// package trainerenv's table, computed from the generation's plan in etcd.
func TestEveryRoleIsGivenTheTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		framework trainerenv.Framework
		args      []string
		nodes     int // of every role, at generation 1
	}{
		{name: "paddle-ps", framework: trainerenv.AnyFramework, args: []string{"--np", "2", "--ps", "1"}, nodes: 3},
		{name: "paddle", framework: trainerenv.Paddle, args: []string{"--np", "2", "--ps", "1", "--framework", "paddle"}, nodes: 3},
		{name: "mindspore", framework: trainerenv.MindSpore, args: []string{"--np", "2", "--framework", "mindspore"}, nodes: 3},
		{name: "mindspore-ps", framework: trainerenv.MindSpore, args: []string{"--np", "2", "--ps", "1", "--framework", "mindspore"}, nodes: 4},
		{name: "pytorch", framework: trainerenv.PyTorch, args: []string{"--np", "2", "--nproc-per-node", "2", "--framework", "pytorch"}, nodes: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			r := startRun(t, append([]string{"--job", tc.name, "--devices", "none"}, tc.args...), envDumper, "STANDIN_DIR="+dir)
			check := func(gen, processes int) map[string]map[string]string {
				t.Helper()
				var got map[string]map[string]string
				require.Eventually(t, func() bool {
					got = dumpedEnvs(dir, gen)
					return len(got) == processes
				}, 60*time.Second, 20*time.Millisecond, "generation %d never had %d processes:\n%s", gen, processes, r.out)
				plan, err := r.client.Plan(t.Context(), tc.name)
				require.NoError(t, err)
				require.EqualValues(t, gen, plan.Generation)
				g := trainerenv.Of(tc.name, plan)
				for _, m := range plan.Members {
					node := g.NodeWith(m, trainerenv.Options{Gloo: -1, Framework: tc.framework,
						Inherited: func(name string) bool { _, ok := os.LookupEnv(name); return ok }})
					for local := range node.Processes() {
						key := fmt.Sprintf("%s-%d", m.Role, m.GlobalRank+local)
						env, ok := got[key]
						require.True(t, ok, "no process %s in generation %d", key, gen)
						for _, kv := range node.Env(local) {
							name, value, set := strings.Cut(kv, "=")
							switch {
							case name == trainerenv.PythonPath || name == trainerenv.ElasticCheckpointSocket:
							case !set:
								assert.NotContains(t, env, name, "%s, generation %d", key, gen)
							default:
								assert.Equal(t, value, env[name], "%s of %s, generation %d", name, key, gen)
							}
						}
					}
				}
				return got
			}
			first := check(1, tc.nodes)
			pid, err := strconv.Atoi(first["worker-1"]["DUMPER_PID"])
			require.NoError(t, err)
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
			check(2, tc.nodes)
			code, _, stderr := cli(t, nil, "scale", "--etcd-endpoints", r.endpoint, "--job", tc.name, "--np", "3", "--wait", "--timeout", "60s")
			require.Equal(t, 0, code, stderr)
			perNode := 1
			if tc.name == "pytorch" {
				perNode = 2
			}
			check(3, tc.nodes+perNode)
			require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
			assert.Equal(t, 143, r.wait())
		})
	}
}

// dumpedEnvs reads envDumper's files of generation gen, by role and rank.
func dumpedEnvs(dir string, gen int) map[string]map[string]string {
	files, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("env-*-gen%d", gen)))
	out := map[string]map[string]string{}
	for _, f := range files {
		env, err := readEnvFile(f)
		if err != nil {
			continue
		}
		key := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "env-"), fmt.Sprintf("-gen%d", gen))
		out[key] = env
	}
	return out
}
