package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// torchftMode is the torchft peer's name in the report.
const torchftMode = "torchft"

// torchftSettings are the lighthouse's: how soon it gives up on a replica
// that stopped heartbeating, and how long a quorum that could form waits
// for replicas that heartbeat but have not asked to join it; and the
// replicas' process group timeout, after which a survivor left waiting in
// an allreduce by a killed replica gives up (with 3 replicas or more, some
// are not the killed one's neighbours and learn of it no sooner).
type torchftSettings struct {
	lighthouse string
	heartbeat  time.Duration
	join       time.Duration
	pgTimeout  time.Duration
}

// lighthouseArgs are torchft_lighthouse's flags, the bind address first.
// min_replicas 1 and a 100 ms tick are torchft's README's.
func (s torchftSettings) lighthouseArgs(port int) []string {
	return []string{"--bind", fmt.Sprintf("127.0.0.1:%d", port), "--min_replicas", "1", "--quorum_tick_ms", "100",
		"--heartbeat_timeout_ms", strconv.FormatInt(s.heartbeat.Milliseconds(), 10),
		"--join_timeout_ms", strconv.FormatInt(s.join.Milliseconds(), 10)}
}

// trainerArgs are torchft_trainer.py's flags for the settings.
func (s torchftSettings) trainerArgs() []string {
	return []string{"--pg-timeout-s", strconv.FormatFloat(s.pgTimeout.Seconds(), 'f', -1, 64)}
}

// describe names the settings for the report's header.
func (s torchftSettings) describe() string {
	args := s.lighthouseArgs(0)
	return "torchft_lighthouse " + strings.Join(args[2:], " ") + "; ProcessGroupGloo timeout " + s.pgTimeout.String()
}

// torchftJob is torchft's fault-tolerant DDP: a lighthouse, and np replica
// groups of one process each (torchft_trainer.py), each serving its own
// TCPStore. A replica killed is started again at once, as its scheduler
// would: it heals from a peer and the quorum grows back.
type torchftJob struct {
	cfg        *config
	np         int
	dir        string
	logDir     string
	script     string
	settings   torchftSettings
	lighthouse *exec.Cmd
	address    string
	// replicas holds each replica group's process, by its
	// REPLICA_GROUP_ID.
	replicas []*exec.Cmd
	output   proctest.Buffer
	session
}

func startTorchft(cfg *config, settings torchftSettings, np int) (*torchftJob, error) {
	script, err := filepath.Abs("bench/recovery/torchft_trainer.py")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.tmp, "torchft-")
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(dir, "steps")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		return nil, err
	}
	j := &torchftJob{cfg: cfg, np: np, dir: dir, logDir: logDir, script: script, settings: settings,
		replicas: make([]*exec.Cmd, np), session: newSession(cfg, logDir)}
	cfg.live.add(j, j.stop)
	port, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		j.stop()
		return nil, err
	}
	// The lighthouse logs every quorum, one a step: to a file, not to
	// memory. It carries the job's environment for sweep.
	logFile, err := os.Create(filepath.Join(dir, "lighthouse.log"))
	if err != nil {
		j.stop()
		return nil, err
	}
	defer logFile.Close()
	j.lighthouse = exec.Command(settings.lighthouse, settings.lighthouseArgs(port)...)
	j.lighthouse.Env = append(os.Environ(), "BENCH_LOG_DIR="+logDir)
	j.lighthouse.Stdout, j.lighthouse.Stderr = logFile, logFile
	j.lighthouse.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := j.lighthouse.Start(); err != nil {
		j.stop()
		return nil, err
	}
	go func() { _ = j.lighthouse.Wait() }()
	if err := waitListening(port, time.Minute); err != nil {
		j.stop()
		return nil, err
	}
	j.address = fmt.Sprintf("http://127.0.0.1:%d", port)
	for replica := range np {
		if err := j.startReplica(replica); err != nil {
			j.stop()
			return nil, err
		}
	}
	if _, err := j.wait(time.Time{}, np); err != nil {
		j.stop()
		return nil, fmt.Errorf("torchft did not start: %w\n%s", err, j.output.String())
	}
	return j, nil
}

// startReplica starts replica group replica's process, with a store port
// of its own: a restarted process serves its group's store anew.
func (j *torchftJob) startReplica(replica int) error {
	storePort, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	cmd := exec.Command(j.cfg.python, append(append([]string{j.script}, j.settings.trainerArgs()...), j.cfg.startupArgs()...)...)
	cmd.Dir = j.dir
	// RUST_LOG=warn: torchft's manager logs every step's quorum at info.
	cmd.Env = append(os.Environ(), "BENCH_LOG_DIR="+j.logDir, "TORCHFT_LIGHTHOUSE="+j.address,
		"REPLICA_GROUP_ID="+strconv.Itoa(replica), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(storePort),
		"RANK=0", "WORLD_SIZE=1", "RUST_LOG=warn")
	cmd.Stdout, cmd.Stderr = &j.output, &j.output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	j.replicas[replica] = cmd
	go func() { _ = cmd.Wait() }()
	return nil
}

// stop kills every replica's tree and the lighthouse, and any process
// left that carries the job's environment. It is safe to call twice, and
// from the harness's signal handler: it reads no step log.
func (j *torchftJob) stop() {
	if !j.cfg.live.remove(j) {
		return
	}
	var pids []int
	for _, c := range j.replicas {
		if c != nil {
			pids = append(pids, tree(c.Process.Pid)...)
		}
	}
	if j.lighthouse != nil && j.lighthouse.Process != nil {
		pids = append(pids, j.lighthouse.Process.Pid)
	}
	_ = killAll(pids)
	sweep(j.logDir)
	os.RemoveAll(j.dir)
}

// killRank SIGKILLs the replica that holds participating rank i % np, and
// starts its replica group's process again at once.
func (j *torchftJob) killRank(i int) (time.Time, int, error) {
	pid, err := j.holder(i, j.np)
	if err != nil {
		return time.Time{}, 0, err
	}
	replica := -1
	for r, c := range j.replicas {
		if c != nil && c.Process.Pid == pid {
			replica = r
		}
	}
	if replica < 0 {
		return time.Time{}, 0, fmt.Errorf("rank %d's process %d is no replica the harness started", i%j.np, pid)
	}
	at := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return at, j.np, err
	}
	return at, j.np, j.startReplica(replica)
}

// measureTorchft kills a replica, runs times, if scenarios hold kill-rank:
// the rows are alone (the survivors step on with np-1 participants) and
// grown-back (every replica steps again with np), both from the kill.
func measureTorchft(cfg *config, settings torchftSettings, np int, scenarios []string) result {
	res := result{np: np, mode: torchftMode}
	for _, s := range scenarios {
		if s == "kill-rank" {
			res.rows = append(res.rows, row{scenario: "alone"}, row{scenario: "grown-back"})
		}
	}
	if len(res.rows) == 0 {
		return res
	}
	j, err := startTorchft(cfg, settings, np)
	if err != nil {
		res.fail(0, err)
		return res
	}
	defer j.stop()
	if err := j.measureAlone(j.killRank, j.np, &res.rows[0], &res.rows[1]); err != nil {
		res.fail(0, fmt.Errorf("%w\n%s\nthe lighthouse's log, its end:\n%s", err, j.output.String(), j.lighthouseTail(40)))
	}
	res.steps, res.transient = j.steady, j.transient
	return res
}

// lighthouseTail is the last n lines of the lighthouse's log, to say why
// a quorum did not form.
func (j *torchftJob) lighthouseTail(n int) string {
	data, err := os.ReadFile(filepath.Join(j.dir, "lighthouse.log"))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// torchftSetup checks that python has torchft and finds the lighthouse,
// beside python unless named.
func torchftSetup(python string, s *torchftSettings) (version string, err error) {
	version, err = output(python, "-c", "import torchft, importlib.metadata as m; print(m.version('torchft'))")
	if err != nil {
		return "", fmt.Errorf("%s has no torchft (make venv; -python bin/venv/bin/python): %w", python, err)
	}
	if s.lighthouse == "" {
		s.lighthouse = filepath.Join(filepath.Dir(python), "torchft_lighthouse")
	}
	if _, err := os.Stat(s.lighthouse); err != nil {
		return "", fmt.Errorf("no torchft_lighthouse: %w", err)
	}
	return version, nil
}
