package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/internal/testkit/pythons"
)

// The real frameworks' data-parallel jobs, on the CPU, from the venv
// (make venv): PaddlePaddle over gloo, MindSpore over its own collectives.
const (
	paddleDP    = "testdata/frameworks/paddle_dp.py"
	paddlePS    = "testdata/frameworks/paddle_ps.py"
	mindsporeDP = "testdata/frameworks/mindspore_dp.py"
)

// stepLine is the line each of them appends to its directory's steps.log
// after each step.
var stepLine = regexp.MustCompile(`(?m)^\[[\w-]+\] gen (\d+) rank (\d+) world (\d+) step (\d+) loss \S+ digest (\w+)$`)

// trainedSteps is what the ranks wrote: by generation, step and rank, the
// parameters' digest; and each generation's world size.
type trainedSteps struct {
	digests map[int]map[int]map[int]string
	world   map[int]int
}

func readSteps(out string) trainedSteps {
	s := trainedSteps{digests: map[int]map[int]map[int]string{}, world: map[int]int{}}
	for _, m := range stepLine.FindAllStringSubmatch(out, -1) {
		gen, _ := strconv.Atoi(m[1])
		rank, _ := strconv.Atoi(m[2])
		world, _ := strconv.Atoi(m[3])
		step, _ := strconv.Atoi(m[4])
		if s.digests[gen] == nil {
			s.digests[gen] = map[int]map[int]string{}
		}
		if s.digests[gen][step] == nil {
			s.digests[gen][step] = map[int]string{}
		}
		s.digests[gen][step][rank] = m[5]
		s.world[gen] = world
	}
	return s
}

// stepsLog is what every rank wrote in dir.
func stepsLog(dir string) string {
	data, _ := os.ReadFile(filepath.Join(dir, "steps.log"))
	return string(data)
}

// trained waits until a generation after the generation after, of
// world ranks, has trained n steps on every rank, and returns it and its
// first step. (A node's loss may take more than one generation to mend.)
func (r *localRun) trained(dir string, after, world, n int) (gen, first int) {
	r.t.Helper()
	return trainedIn(r.t, dir, after, world, n, func() string { return r.out.String() })
}

// trainedIn is trained for the job whose ranks write their steps to dir;
// out says what its processes printed, if the wait fails.
func trainedIn(t *testing.T, dir string, after, world, n int, out func() string) (gen, first int) {
	t.Helper()
	require.Eventually(t, func() bool {
		s := readSteps(stepsLog(dir))
		for g, steps := range s.digests {
			if g <= after || s.world[g] != world {
				continue
			}
			lo := -1
			for step := range steps {
				if lo < 0 || step < lo {
					lo = step
				}
			}
			if len(steps[lo+n-1]) == world {
				gen, first = g, lo
				return true
			}
		}
		return false
	}, 3*time.Minute, 50*time.Millisecond, "no generation after %d trained %d steps on %d ranks:\n%s\n%s", after, n, world, out(), stepsLog(dir))
	return gen, first
}

// frameworkProcess is the pid of a live process of the script among those
// whose environment holds marker, with every one of vars in its
// environment too: a process of a real framework's job.
func frameworkProcess(t *testing.T, marker, script string, vars ...string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		for _, p := range proctest.Marked(marker) {
			env, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/environ")
			env = append([]byte{0}, env...)
			if !strings.Contains(strings.Join(p.Args, " "), script) {
				continue
			}
			all := true
			for _, v := range vars {
				all = all && bytes.Contains(env, []byte("\x00"+v+"\x00"))
			}
			if all {
				pid = p.Pid
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "no process of %s with %v", script, vars)
	return pid
}

// A real PaddlePaddle data-parallel job (paddle.DataParallel over gloo, on
// the CPU) under coordinator run --framework paddle: its processes get
// what paddle.distributed.launch gives, and init_parallel_env() forms the
// group from it. A node killed whole (its sidecar and trainer, SIGKILL
// at once) is replaced and the job trains on from its checkpoint; scaled
// up to three nodes and back to two, it trains on at each size from its
// checkpoint. At every step, every rank holds the same parameters.
func TestARealPaddleJobLosesANodeAndScales(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, launcher string }{
		{"the script", ""},
		// The seed's own form: paddle.distributed.launch run per node,
		// which starts the node's process itself.
		{"paddle.distributed.launch", "paddle.distributed.launch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			py := pythons.Paddle(t)
			dir := t.TempDir()
			command := []string{py, paddleDP}
			if tc.launcher != "" {
				command = []string{py, "-m", tc.launcher, "--log_dir", filepath.Join(dir, "log"), paddleDP}
			}
			job := "paddle"
			if tc.launcher != "" {
				job = "paddlelaunch"
			}
			aRealPaddleJobLosesANodeAndScales(t, job, dir, command)
		})
	}
}

func aRealPaddleJobLosesANodeAndScales(t *testing.T, job, dir string, command []string) {
	r := startRun(t, []string{"--np", "2", "--job", job, "--framework", "paddle"}, command,
		"PADDLE_DIR="+dir, "STEP_SECONDS=0.05", "SAVE_EVERY=5")

	gen, _ := r.trained(dir, 0, 2, 12)
	plan := r.planOf(job, int64(gen))
	var victim string
	for _, m := range plan.Members {
		if m.GlobalRank == 1 {
			victim = m.Node
		}
	}
	require.NotEmpty(t, victim)
	for _, pid := range proctest.FreezeTree(r.sidecarPid(victim)) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	gen, second := r.trained(dir, gen, 2, 10)
	assert.Greater(t, second, 1, "the job resumed from its checkpoint, not from the start")

	scale := func(np int) {
		t.Helper()
		code, _, stderr := cli(t, nil, "scale", "--etcd-endpoints", r.endpoint, "--job", job, "--np", strconv.Itoa(np))
		require.Equal(t, 0, code, stderr)
	}
	scale(3)
	gen, up := r.trained(dir, gen, 3, 10)
	assert.Greater(t, up, second, "the grown job went on from its checkpoint")
	scale(2)
	_, down := r.trained(dir, gen, 2, 10)
	assert.Greater(t, down, up, "the shrunk job went on from its checkpoint")

	sameParameters(t, dir)
}

// A PaddlePaddle parameter-server job's roles with the real framework
// under run --framework paddle --ps 2: two servers and two workers, each
// process's fleet.init(PaddleCloudRoleMaker()) finding its role, index
// and endpoints in what paddle.distributed.launch's ps.py gives, server 0
// serving the workers' gloo store, the workers training over their gloo
// group (paddle_ps.py; the servers' own training is not in the CPU wheel).
// A worker killed, then a server killed: each time every process of the
// next generation starts anew (as Paddle's launcher stops a pod's servers
// with its workers), the servers find their roles again, and the workers
// train on from the checkpoint.
func TestARealPaddleParameterServerJobLosesAWorkerAndAServer(t *testing.T) {
	t.Parallel()
	py := pythons.Paddle(t)
	dir := t.TempDir()
	r := startRun(t, []string{"--np", "2", "--ps", "2", "--job", "paddleps", "--framework", "paddle"}, []string{py, paddlePS},
		"PADDLE_DIR="+dir, "STEP_SECONDS=0.05", "SAVE_EVERY=5")
	marker := "ELASTIC_TEST_MARK=" + r.marker

	gen, _ := r.trained(dir, 0, 2, 10)
	serversFound(t, dir, gen, 2)
	require.NoError(t, syscall.Kill(frameworkProcess(t, marker, paddlePS, "TRAINING_ROLE=TRAINER", "PADDLE_TRAINER_ID=1"), syscall.SIGKILL))
	gen, second := r.trained(dir, gen, 2, 10)
	assert.Greater(t, second, 1, "the job resumed from its checkpoint after its worker's loss, not from the start")
	serversFound(t, dir, gen, 2)

	require.NoError(t, syscall.Kill(frameworkProcess(t, marker, paddlePS, "TRAINING_ROLE=PSERVER"), syscall.SIGKILL))
	gen, third := r.trained(dir, gen, 2, 10)
	assert.Greater(t, third, second, "the job resumed from its checkpoint after its server's loss")
	serversFound(t, dir, gen, 2)
	sameParameters(t, dir)
}

// serversFound checks that in generation gen, each of n servers found its
// own index of n in PaddlePaddle's role maker, at its own endpoint. Server
// 0's fleet.init returns only once its gloo store has stopped, which it
// looks at every 5 s (fleet/base/role_maker.py, _init_http).
func serversFound(t *testing.T, dir string, gen, n int) {
	t.Helper()
	line := regexp.MustCompile(`(?m)^\[paddle-ps\] gen (\d+) server (\d+) of (\d+) at (\S+)$`)
	endpoints := map[int]string{}
	require.Eventually(t, func() bool {
		for _, m := range line.FindAllStringSubmatch(stepsLog(dir), -1) {
			if g, _ := strconv.Atoi(m[1]); g == gen && m[3] == strconv.Itoa(n) {
				i, _ := strconv.Atoi(m[2])
				endpoints[i] = m[4]
			}
		}
		return len(endpoints) == n
	}, time.Minute, 100*time.Millisecond, "generation %d's servers:\n%s", gen, stepsLog(dir))
	seen := map[string]bool{}
	for _, ep := range endpoints {
		assert.False(t, seen[ep], "two servers at %s", ep)
		seen[ep] = true
	}
}

// sameParameters checks that at every step every rank held the same
// parameters.
func sameParameters(t *testing.T, dir string) {
	t.Helper()
	s := readSteps(stepsLog(dir))
	for gen, steps := range s.digests {
		for step, byRank := range steps {
			if len(byRank) < s.world[gen] {
				continue // the step a stop interrupted
			}
			for rank, d := range byRank {
				assert.Equal(t, byRank[0], d, "generation %d, step %d: rank %d's parameters are rank 0's", gen, step, rank)
			}
		}
	}
}

// A real MindSpore data-parallel job (DATA_PARALLEL over MindSpore's own
// CPU collectives) under coordinator run --framework mindspore: a
// scheduler node and two workers, each started with what msrun gives
// (MS_ROLE, MS_SCHED_HOST/PORT, MS_WORKER_NUM, MS_NODE_ID). A worker
// killed (SIGKILL) ends the generation: MindSpore's cluster cannot take a
// worker back (a restarted one is refused, "Repeated registration", and
// its scheduler times the lost one out only after 30 s), so every process
// of the next starts anew, the scheduler's too, and the job trains on from
// its checkpoint.
func TestARealMindSporeJobLosesAWorker(t *testing.T) {
	t.Parallel()
	py := pythons.MindSpore(t)
	dir := t.TempDir()
	r := startRun(t, []string{"--np", "2", "--job", "ms", "--framework", "mindspore"}, []string{py, mindsporeDP},
		"MS_DIR="+dir, "STEP_SECONDS=0.05", "SAVE_EVERY=5")

	gen, _ := r.trained(dir, 0, 2, 12)
	victim := frameworkProcess(t, "ELASTIC_TEST_MARK="+r.marker, mindsporeDP, "MS_ROLE=MS_WORKER", "MS_NODE_ID=1")
	require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
	_, second := r.trained(dir, gen, 2, 10)
	assert.Greater(t, second, 1, "the job resumed from its checkpoint, not from the start")
	sameParameters(t, dir)
}
