package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// torchrunJob is torchrun with an agent per node, as on np machines: c10d
// rendezvous, a 0.1 s monitor interval and a 1 s last call, trainer.py
// saving to disk every 50 steps (unless more arguments say otherwise).
type torchrunJob struct {
	cfg    *config
	np     int
	dir    string
	logDir string
	args   []string
	env    []string
	agents []*exec.Cmd
	// host is the agent that serves the c10d store: the first started.
	host   int
	output proctest.Buffer
	session
}

// startTorchrun starts np agents; up to maxNodes may join the job
// (--nnodes np:maxNodes), np only when maxNodes is not above np. more
// are arguments for the trainer.
func startTorchrun(cfg *config, np, stateMB, maxNodes int, more []string) (*torchrunJob, error) {
	dir, err := os.MkdirTemp(cfg.tmp, "torchrun-")
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(dir, "steps")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		return nil, err
	}
	port, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	j := &torchrunJob{cfg: cfg, np: np, dir: dir, logDir: logDir, env: append(os.Environ(), "BENCH_LOG_DIR="+logDir),
		session: newSession(cfg, logDir)}
	cfg.live.add(j, j.stop)
	// Debian's torchrun 1.13 spells its flags with underscores and needs
	// -r 1 -t 1 to start.
	j.args = append([]string{"-m", "torch.distributed.run", "-r", "1", "-t", "1",
		"--nnodes", nnodes(np, maxNodes), "--nproc_per_node", "1", "--max_restarts", "1000000", "--monitor_interval", "0.1",
		"--rdzv_backend", "c10d", "--rdzv_endpoint", fmt.Sprintf("127.0.0.1:%d", port), "--rdzv_id", "bench",
		"--rdzv_conf", "last_call_timeout=1", cfg.script}, trainerArgs(false, filepath.Join(dir, "checkpoint.pt"), stateMB)...)
	j.args = append(append(j.args, cfg.startupArgs()...), more...)
	// The first agent serves the c10d store; the others start once it
	// listens, so that it is known which one does.
	if err := j.startAgent(); err != nil {
		j.stop()
		return nil, err
	}
	j.host = j.agents[0].Process.Pid
	if err := waitListening(port, time.Minute); err != nil {
		j.stop()
		return nil, err
	}
	for range np - 1 {
		if err := j.startAgent(); err != nil {
			j.stop()
			return nil, err
		}
	}
	if _, err := j.wait(time.Time{}, np); err != nil {
		j.stop()
		return nil, fmt.Errorf("torchrun did not start: %w\n%s", err, j.output.String())
	}
	return j, nil
}

// nnodes is torchrun's --nnodes for np agents, up to maxNodes.
func nnodes(np, maxNodes int) string {
	if maxNodes > np {
		return fmt.Sprintf("%d:%d", np, maxNodes)
	}
	return strconv.Itoa(np)
}

func (j *torchrunJob) startAgent() error {
	cmd := exec.Command(j.cfg.python, j.args...)
	cmd.Dir = j.dir
	cmd.Env = j.env
	cmd.Stdout, cmd.Stderr = &j.output, &j.output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	j.agents = append(j.agents, cmd)
	go func() { _ = cmd.Wait() }()
	return nil
}

func waitListening(port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return c.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("torchrun's c10d store did not listen on %d within %s", port, timeout)
}

// stop kills every agent's tree, and any process left that carries the
// job's environment, wherever it was reparented. It is safe to call twice,
// and from the harness's signal handler: it reads no step log.
func (j *torchrunJob) stop() {
	if !j.cfg.live.remove(j) {
		return
	}
	var pids []int
	for _, a := range j.agents {
		pids = append(pids, tree(a.Process.Pid)...)
	}
	_ = killAll(pids)
	sweep(j.logDir)
	os.RemoveAll(j.dir)
}

func (j *torchrunJob) victim(rank int) (int, error) { return j.holder(rank, j.np) }

func (j *torchrunJob) killRank(i int) (time.Time, int, error) { return j.killHolder(i, j.np) }

// agentFor returns the agent whose worker holds rank i % np, or the next
// rank's: never the agent that serves the c10d store, whose loss ends the
// job.
func (j *torchrunJob) agentFor(i int) (int, error) {
	for k := range j.np {
		pid, err := j.victim((i + k) % j.np)
		if err != nil {
			return 0, err
		}
		if agent := childOf(pid, os.Getpid()); agent != 0 && agent != j.host {
			return agent, nil
		}
	}
	return 0, fmt.Errorf("no torchrun agent to fault but the store's")
}

// killAgent kills an agent and its worker at once, and starts another in
// its place, as a pod's restart would. The agent that serves the c10d
// store is spared: its loss ends the job.
func (j *torchrunJob) killAgent(i int) (time.Time, int, error) {
	agent, err := j.agentFor(i)
	if err != nil {
		return time.Time{}, 0, err
	}
	pids := tree(agent)
	at := time.Now()
	if err := killAll(pids); err != nil {
		return at, j.np, err
	}
	j.agents = slices.DeleteFunc(j.agents, func(c *exec.Cmd) bool { return c.Process.Pid == agent })
	return at, j.np, j.startAgent()
}

// measureTorchrun runs the scenarios (kill-rank, kill-node) under torchrun.
func measureTorchrun(cfg *config, np, stateMB int, scenarios []string) result {
	res := result{np: np, mode: "torchrun", stateMB: stateMB}
	for _, s := range scenarios {
		if s == "kill-rank" || s == "kill-node" {
			res.rows = append(res.rows, row{scenario: s})
		}
	}
	if len(res.rows) == 0 {
		return res
	}
	j, err := startTorchrun(cfg, np, stateMB, 0, nil)
	if err != nil {
		res.fail(0, err)
		return res
	}
	defer j.stop()
	for i := range res.rows {
		r := &res.rows[i]
		if r.scenario == "kill-rank" {
			r.outcomes, err = j.measure(j.killRank)
		} else {
			r.outcomes, err = j.measure(j.killAgent)
		}
		if err != nil {
			res.fail(i, err)
			break
		}
	}
	res.steps, res.transient = j.steady, j.transient
	return res
}

// stopAgent stops the agent started last but the store's, as a scale-down
// would: SIGTERM, on which the agent stops its worker and leaves.
func (j *torchrunJob) stopAgent() (time.Time, func(), error) {
	for k := len(j.agents) - 1; k >= 0; k-- {
		a := j.agents[k]
		if a.Process.Pid == j.host {
			continue
		}
		at := time.Now()
		if err := a.Process.Signal(syscall.SIGTERM); err != nil {
			return at, nil, fmt.Errorf("stop agent %d: %w", a.Process.Pid, err)
		}
		j.agents = slices.Delete(j.agents, k, k+1)
		return at, nil, nil
	}
	return time.Now(), nil, fmt.Errorf("no torchrun agent to stop but the store's")
}
