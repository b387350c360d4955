package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// The paddle suite: a real PaddlePaddle data-parallel job
// (testdata/frameworks/paddle_dp.py: paddle.DataParallel over gloo on the
// CPU) under coordinator run --framework paddle, and under PaddlePaddle's
// own elastic launcher in the same run, the same faults for both.

// paddleLauncherMode is the peer's name in the report.
const paddleLauncherMode = "paddle.distributed.launch"

// paddleJob is what both run: the interpreter with PaddlePaddle, the
// script, and its variables but for its directory.
type paddleJob struct {
	python string
	script string
	env    []string
}

func newPaddleJob(python string) (paddleJob, error) {
	script, err := filepath.Abs("testdata/frameworks/paddle_dp.py")
	if err != nil {
		return paddleJob{}, err
	}
	if _, err := os.Stat(script); err != nil {
		return paddleJob{}, fmt.Errorf("run from the repository's root: %w", err)
	}
	// Steps padded to 20 ms as trainer.py's; the checkpoint on disk every
	// 50 steps, as the cold mode's.
	return paddleJob{python: python, script: script, env: []string{"STEP_SECONDS=0.02", "SAVE_EVERY=50"}}, nil
}

// measurePaddle runs the scenarios (kill-rank, kill-node) on a Paddle job
// of np nodes under coordinator run, then under PaddlePaddle's launcher.
func measurePaddle(cfg *config, job paddleJob, np int, scenarios []string, peer bool) []result {
	var want []string
	for _, s := range scenarios {
		if s == "kill-rank" || s == "kill-node" {
			want = append(want, s)
		}
	}
	ours := result{np: np, mode: "run --framework paddle"}
	for _, s := range want {
		ours.rows = append(ours.rows, row{scenario: s})
	}
	progress("np %d, paddle under coordinator run: %v", np, want)
	dir, err := os.MkdirTemp(cfg.tmp, "paddle-")
	if err != nil {
		ours.fail(0, err)
		return []result{ours}
	}
	j, err := startCoordinator(cfg, np, modes[0], 0, extras{
		runArgs: append(slices.Clone(recoveryArgs), "--framework", "paddle"),
		command: []string{job.python, job.script},
		env:     append(slices.Clone(job.env), "PADDLE_DIR="+dir),
	})
	if err != nil {
		ours.fail(0, err)
	} else {
		measureRows(&ours, &j.session, map[string]func(int) (time.Time, int, error){"kill-rank": j.killRank, "kill-node": j.killNode})
		j.stop()
	}
	out := []result{ours}
	if !peer {
		return out
	}
	theirs := result{np: np, mode: paddleLauncherMode}
	for _, s := range want {
		theirs.rows = append(theirs.rows, row{scenario: s})
	}
	progress("np %d, paddle under %s", np, paddleLauncherMode)
	l, err := startPaddleLaunch(cfg, job, np)
	if err != nil {
		theirs.fail(0, err)
		return append(out, theirs)
	}
	defer l.stop()
	measureRows(&theirs, &l.session, map[string]func(int) (time.Time, int, error){"kill-rank": l.killRank, "kill-node": l.killLauncher})
	return append(out, theirs)
}

// measureRows measures each row of res with its scenario's fault.
func measureRows(res *result, s *session, faults map[string]func(int) (time.Time, int, error)) {
	for i := range res.rows {
		var err error
		if res.rows[i].outcomes, err = s.measure(faults[res.rows[i].scenario]); err != nil {
			res.fail(i, err)
			break
		}
	}
	res.steps, res.transient = s.steady, s.transient
}

// paddleLaunchJob is PaddlePaddle's elastic launcher, one per node as on
// np machines: `python -m paddle.distributed.launch --master etcd://...`
// (launch/controllers/collective.py, CollectiveElasticController;
// launch/controllers/master.py, ETCDMaster) against an etcd of its own,
// --elastic_level 1 (a failed trainer restarts its pod and, through etcd,
// its peers' instead of ending the job), restarts without end.
type paddleLaunchJob struct {
	cfg       *config
	job       paddleJob
	np        int
	dir       string
	logDir    string
	etcd      *exec.Cmd
	args      []string
	env       []string
	launchers []*exec.Cmd
	started   int // launchers started, for their log directories
	output    proctest.Buffer
	session
}

func startPaddleLaunch(cfg *config, job paddleJob, np int) (*paddleLaunchJob, error) {
	dir, err := os.MkdirTemp(cfg.tmp, "paddlelaunch-")
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(dir, "steps")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		return nil, err
	}
	l := &paddleLaunchJob{cfg: cfg, job: job, np: np, dir: dir, logDir: logDir, session: newSession(cfg, logDir)}
	cfg.live.add(l, l.stop)
	client, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		l.stop()
		return nil, err
	}
	peer, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		l.stop()
		return nil, err
	}
	// The launcher's etcd client (etcd3) speaks plain gRPC with no
	// credentials: an etcd of the job's own, on the loopback.
	l.etcd = exec.Command(cfg.coordinator, "etcd", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", client), "--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer))
	l.etcd.Stdout, l.etcd.Stderr = &l.output, &l.output
	l.etcd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := l.etcd.Start(); err != nil {
		l.stop()
		return nil, err
	}
	go func() { _ = l.etcd.Wait() }()
	if err := waitListening(client, time.Minute); err != nil {
		l.stop()
		return nil, err
	}
	l.args = []string{"-m", "paddle.distributed.launch", "--master", fmt.Sprintf("etcd://127.0.0.1:%d", client),
		"--nnodes", strconv.Itoa(np), "--job_id", "bench", "--elastic_level", "1", "--max_restart", "1000000"}
	// etcd3's generated protobuf modules are older than the protobuf the
	// frameworks need: only its Python implementation reads them.
	l.env = append(append(os.Environ(), "BENCH_LOG_DIR="+logDir, "PADDLE_DIR="+dir, "POD_IP=127.0.0.1",
		"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python"), job.env...)
	for i := range np {
		if err := l.startLauncher(i); err != nil {
			l.stop()
			return nil, err
		}
	}
	if _, err := l.wait(time.Time{}, np); err != nil {
		l.stop()
		return nil, fmt.Errorf("%s did not start: %w\n%s", paddleLauncherMode, err, l.output.String())
	}
	return l, nil
}

// startLauncher starts a node's launcher, its log directory the node's.
func (l *paddleLaunchJob) startLauncher(node int) error {
	l.started++
	args := append(slices.Clone(l.args), "--log_dir", filepath.Join(l.dir, fmt.Sprintf("log-%d-%d", node, l.started)), l.job.script)
	cmd := exec.Command(l.job.python, args...)
	cmd.Dir = l.dir
	cmd.Env = l.env
	cmd.Stdout, cmd.Stderr = &l.output, &l.output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	l.launchers = append(l.launchers, cmd)
	go func() { _ = cmd.Wait() }()
	return nil
}

// stop kills every launcher's tree and the etcd, and any process left
// that carries the job's environment. It is safe to call twice, and from
// the harness's signal handler.
func (l *paddleLaunchJob) stop() {
	if !l.cfg.live.remove(l) {
		return
	}
	var pids []int
	for _, c := range l.launchers {
		pids = append(pids, tree(c.Process.Pid)...)
	}
	_ = killAll(pids)
	sweep(l.logDir)
	if l.etcd != nil && l.etcd.Process != nil {
		_ = l.etcd.Process.Kill()
	}
	os.RemoveAll(l.dir)
}

// killRank kills the trainer of rank i % np; its launcher restarts it.
func (l *paddleLaunchJob) killRank(i int) (time.Time, int, error) { return l.killHolder(i, l.np) }

// killLauncher kills the launcher whose trainer holds rank i % np and its
// trainer at once, and starts another in its place, as a pod's restart
// would.
func (l *paddleLaunchJob) killLauncher(i int) (time.Time, int, error) {
	pid, err := l.holder(i, l.np)
	if err != nil {
		return time.Time{}, 0, err
	}
	launcher := childOf(pid, os.Getpid())
	if launcher == 0 {
		return time.Time{}, 0, fmt.Errorf("trainer %d is under no launcher of the harness", pid)
	}
	pids := tree(launcher)
	at := time.Now()
	if err := killAll(pids); err != nil {
		return at, l.np, err
	}
	l.launchers = slices.DeleteFunc(l.launchers, func(c *exec.Cmd) bool { return c.Process.Pid == launcher })
	return at, l.np, l.startLauncher(i % l.np)
}

// runPaddleSuite measures the Paddle job at every size and writes the
// report.
func runPaddleSuite(cfg *config, python string, sizes []int, scenarios []string, peer bool, begun time.Time, load, command, out string) {
	python, err := filepath.Abs(python)
	if err != nil {
		fatalf("%v", err)
	}
	version, err := output(python, "-c", "import paddle; print(paddle.__version__)")
	if err != nil {
		fatalf("-paddle-python %s has no PaddlePaddle (make venv): %v", python, err)
	}
	job, err := newPaddleJob(python)
	if err != nil {
		fatalf("%v", err)
	}
	rep := report{date: begun, machine: fmt.Sprintf("%d CPUs, %s", runtime.NumCPU(), cpuModel()), command: command,
		load: load, missing: map[string]string{}, steadyAfter: cfg.steadyAfter, peer: paddleLauncherMode}
	for _, np := range sizes {
		rep.results = append(rep.results, measurePaddle(cfg, job, np, scenarios, peer)...)
	}
	rep.took = time.Since(begun)
	rep.load += ", at the end " + loadAverage()
	cleanUp(cfg)
	rep.header = writePaddleHeader(&rep, python, version)
	var buf bytes.Buffer
	rep.write(&buf)
	writeReport(buf.Bytes(), out)
}

// writePaddleHeader describes the paddle suite's job and modes.
func writePaddleHeader(r *report, python, version string) func(io.Writer) {
	return func(w io.Writer) {
		fmt.Fprintf(w, "bench-recovery -suite paddle: a real PaddlePaddle data-parallel job (testdata/frameworks/paddle_dp.py:\n")
		fmt.Fprintf(w, "paddle.DataParallel over gloo on the CPU, an 8-32-1 MLP with Adam, steps padded to 20 ms, rank 0 saving\n")
		fmt.Fprintf(w, "to disk every 50 steps, every start paying Paddle's own import and init_parallel_env) on coordinator run\n")
		fmt.Fprintf(w, "--np N --framework paddle, and under PaddlePaddle's elastic launcher in the same run.\n")
		fmt.Fprintf(w, "date: %s; took %s\n", r.date.Format("2006-01-02 15:04 MST"), r.took.Round(time.Second))
		fmt.Fprintf(w, "machine: %s; load average at the start %s\n", r.machine, r.load)
		fmt.Fprintf(w, "command: %s\n", r.command)
		fmt.Fprintf(w, "paddle: %s (%s)\n", version, python)
		fmt.Fprintf(w, "\nmodes: run --framework paddle = the script under coordinator run (cold: no warm interpreter);\n")
		fmt.Fprintf(w, "       %s = a launcher per node, --master etcd://127.0.0.1:PORT (an etcd of its own,\n", paddleLauncherMode)
		fmt.Fprintf(w, "       plain), --nnodes N --elastic_level 1 --max_restart 1000000 --job_id bench.\n")
		fmt.Fprintf(w, "\nfigures: median of the runs (min–max), from the trainers' own step logs.\n")
		fmt.Fprintf(w, "  TRAINING AGAIN  fault → the last rank of the new generation takes its first step\n")
		fmt.Fprintf(w, "  PAUSE           the old generation's last step, on any rank → the same end point\n")
		fmt.Fprintf(w, "  STEPS LOST      highest step done before, + 1, − the step the new generation resumed from\n")
		fmt.Fprintf(w, "  NEW TRAINER     of that: a new process's start (before import paddle) → its first step, the slowest rank\n")
		fmt.Fprintf(w, "kill one rank: the trainer of rank 1 (then 0, ...) SIGKILLed. kill a node: its sidecar and trainer (the launcher\n")
		fmt.Fprintf(w, "and its trainer) SIGKILLed at once; run starts the sidecar again, the harness starts another launcher.\n")
	}
}
