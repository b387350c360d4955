package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/internal/printers"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// mode is how a job on `coordinator run` is run: warm interpreters or not,
// a checkpoint in memory every step or on disk every 50 steps, and hot
// spares (run --spares: nodes that register, preload and wait with no
// rank, to take a lost node's place at once).
type mode struct {
	name    string
	preload bool
	memory  bool
	spares  int
	// inPlace runs the trainer in elastic.run with run --in-place: ranks
	// keep their process across generations, and the spare has run the
	// trainer's start-up ahead.
	inPlace bool
	// alone runs the job with --np 1:N and no spare: a killed rank's
	// survivor trains on alone while the rank's node starts its trainer
	// again, and the job grows back to N once it is ready.
	alone bool
}

var modes = []mode{
	{name: "cold", preload: false, memory: false},
	{name: "warm", preload: true, memory: true},
	{name: "preload", preload: true, memory: false},
	{name: "memory", preload: false, memory: true},
	{name: "spare", preload: true, memory: true, spares: 1},
	{name: "inplace", preload: true, memory: true, spares: 1, inPlace: true},
	{name: "alone", preload: true, memory: true, inPlace: true, alone: true},
}

// trainerArgs are trainer.py's arguments for a checkpoint in memory (every
// step) or on disk (every 50 steps) at path.
func trainerArgs(memory bool, path string, stateMB int) []string {
	if memory {
		return []string{"--checkpoint", "memory", "--every", "1", "--path", path, "--state-mb", strconv.Itoa(stateMB)}
	}
	return []string{"--checkpoint", "disk", "--every", "50", "--path", path, "--state-mb", strconv.Itoa(stateMB)}
}

// extras are what a job runs with beyond its mode: flags for run, and
// arguments for the trainer after its checkpoint's.
type extras struct {
	runArgs     []string
	trainerArgs []string
	// rankLogs keeps every rank's output in a file (run --log-dir, --tee
	// none), for the stacks a hang stop writes.
	rankLogs bool
	// command, if set, is the training command in place of trainer.py
	// (whose arguments are then left out), with env added to its
	// environment: another framework's job.
	command []string
	env     []string
}

// recoveryArgs are run's flags for the recovery suite: restarts without
// end, and a shorter grace period than the default.
var recoveryArgs = []string{"--max-restarts", "1000000", "--grace-period", "5s"}

// coordinatorJob is one `coordinator run --np N` of trainer.py.
type coordinatorJob struct {
	cfg      *config
	np       int
	dir      string
	logDir   string
	rankLogs string
	cmd      *exec.Cmd
	output   proctest.Buffer
	endpoint string
	session
}

func startCoordinator(cfg *config, np int, m mode, stateMB int, x extras) (*coordinatorJob, error) {
	dir, err := os.MkdirTemp(cfg.tmp, "job-")
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(dir, "steps")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		return nil, err
	}
	j := &coordinatorJob{cfg: cfg, np: np, dir: dir, logDir: logDir,
		session: newSession(cfg, logDir)}
	npFlag := strconv.Itoa(np)
	if m.alone {
		npFlag = "1:" + npFlag
	}
	args := []string{"run", "--np", npFlag, "--job", "bench"}
	if m.preload {
		args = append(args, "--preload", "torch")
	}
	if m.spares > 0 {
		args = append(args, "--spares", strconv.Itoa(m.spares))
	}
	if m.inPlace {
		args = append(args, "--in-place")
	}
	if x.rankLogs {
		j.rankLogs = filepath.Join(dir, "ranks")
		args = append(args, "--log-dir", j.rankLogs, "--tee", "none")
	}
	args = append(append(args, x.runArgs...), cfg.runArgs...)
	if x.command != nil {
		args = append(append(args, "--"), x.command...)
	} else {
		args = append(append(args, "--", cfg.python, cfg.script), trainerArgs(m.memory, filepath.Join(dir, "checkpoint.pt"), stateMB)...)
		args = append(args, cfg.startupArgs()...)
		if m.inPlace {
			args = append(args, "--in-place")
		}
	}
	j.cmd = exec.Command(cfg.coordinator, append(args, x.trainerArgs...)...)
	j.cmd.Dir = dir
	j.cmd.Env = append(append(os.Environ(), "BENCH_LOG_DIR="+logDir), x.env...)
	j.cmd.Stdout, j.cmd.Stderr = &j.output, &j.output
	// A group of its own, out of reach of the terminal's interrupt: the
	// harness stops it on its own signal (liveJobs), and run is told when
	// the harness dies.
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := j.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cfg.live.add(j, j.stop)
	if j.endpoint, err = waitEndpoint(&j.output); err != nil {
		j.stop()
		return nil, err
	}
	if _, err := j.wait(time.Time{}, np); err != nil {
		j.stop()
		return nil, fmt.Errorf("the job did not start: %w\n%s", err, j.output.String())
	}
	return j, nil
}

var endpointLine = regexp.MustCompile(`etcd serves on (\S+);`)

func waitEndpoint(out *proctest.Buffer) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if m := endpointLine.FindStringSubmatch(out.String()); m != nil {
			return m[1], nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "", fmt.Errorf("coordinator run printed no endpoint:\n%s", out.String())
}

// stop ends run and everything it started: SIGTERM (a trainer the hang
// suite stopped is continued first, to take it), then SIGKILL to what is
// left of its tree after 20 s, and to any process left that carries the
// job's environment, wherever it was reparented. It is safe to call
// twice, and from the harness's signal handler: it reads no step log.
func (j *coordinatorJob) stop() {
	if !j.cfg.live.remove(j) {
		return
	}
	done := make(chan struct{})
	go func() {
		_ = j.cmd.Wait()
		close(done)
	}()
	pids := tree(j.cmd.Process.Pid)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	_ = j.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = killAll(append(tree(j.cmd.Process.Pid), pids...))
		<-done
	}
	sweep(j.logDir)
	os.RemoveAll(j.dir)
}

// victim returns the trainer process that holds rank i % np.
func (j *coordinatorJob) victim(i int) (int, error) { return j.holder(i, j.np) }

// killRank kills the trainer of rank i % np.
func (j *coordinatorJob) killRank(i int) (time.Time, int, error) { return j.killHolder(i, j.np) }

// killNode kills the node whose trainer holds rank i % np: its sidecar
// and everything under it (guard, trainers, warm processes), at once.
// `run` starts the sidecar again, as a container's restart would.
func (j *coordinatorJob) killNode(i int) (time.Time, int, error) {
	pid, err := j.victim(i)
	if err != nil {
		return time.Time{}, 0, err
	}
	sidecar := childOf(pid, j.cmd.Process.Pid)
	if sidecar == 0 {
		return time.Time{}, 0, fmt.Errorf("trainer %d is not under coordinator run", pid)
	}
	pids := tree(sidecar)
	at := time.Now()
	return at, j.np, killAll(pids)
}

// killGuard kills the guard of the node whose trainer holds rank i % np,
// alone: the trainer (its child, warm or cold) and the node's warm
// interpreters die with it (Pdeathsig), and the sidecar sweeps what they
// left and starts another guard.
func (j *coordinatorJob) killGuard(i int) (time.Time, int, error) {
	pid, err := j.victim(i)
	if err != nil {
		return time.Time{}, 0, err
	}
	guard := parentOf(pid)
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", guard))
	if args := strings.Split(string(cmdline), "\x00"); len(args) < 2 || args[1] != "guard" {
		return time.Time{}, 0, fmt.Errorf("trainer %d's parent %d is not a guard", pid, guard)
	}
	at := time.Now()
	return at, j.np, syscall.Kill(guard, syscall.SIGKILL)
}

// scale runs `coordinator scale --np np` against run's etcd; the fault's
// time is the command's start.
func (j *coordinatorJob) scale(np int) (time.Time, int, error) {
	cmd := exec.Command(j.cfg.coordinator, "scale", "--etcd-endpoints", j.endpoint, "--job", "bench", "--np", strconv.Itoa(np))
	at := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return at, np, fmt.Errorf("coordinator scale --np %d: %w: %s", np, err, out)
	}
	return at, np, nil
}

// measureCoordinator runs the scenarios on one job. A scenario whose
// job failed says why in its row's note.
func measureCoordinator(cfg *config, np int, m mode, stateMB int, scenarios []string) result {
	res := result{np: np, mode: m.name, stateMB: stateMB}
	for _, s := range scenarios {
		switch {
		case s == "scale":
			res.rows = append(res.rows, row{scenario: "scale-up"}, row{scenario: "scale-down"})
		case s == "kill-rank" && m.alone:
			res.rows = append(res.rows, row{scenario: "alone"}, row{scenario: "grown-back"})
		case m.alone:
			// only a killed rank is measured alone
		default:
			res.rows = append(res.rows, row{scenario: s})
		}
	}
	j, err := startCoordinator(cfg, np, m, stateMB, extras{runArgs: recoveryArgs})
	if err != nil {
		res.fail(0, err)
		return res
	}
	defer j.stop()
	for i := 0; i < len(res.rows); i++ {
		r := &res.rows[i]
		switch r.scenario {
		case "kill-rank":
			r.outcomes, err = j.measure(j.killRank)
		case "kill-node":
			r.outcomes, err = j.measure(j.killNode)
		case "kill-guard":
			r.outcomes, err = j.measure(j.killGuard)
		case "scale-up":
			err = j.measureScale(r, &res.rows[i+1])
			i++
		case "alone":
			err = j.measureAlone(j.killRank, j.np, r, &res.rows[i+1])
			i++
		}
		if err != nil {
			res.fail(i, err)
			break
		}
	}
	res.steps, res.transient = j.steady, j.transient
	return res
}

// measureScale scales up by one and back down, runs times.
func (j *coordinatorJob) measureScale(up, down *row) error {
	runs := j.runs
	j.runs = 1
	defer func() { j.runs = runs }()
	for range runs {
		for _, step := range []struct {
			np  int
			row *row
		}{{j.np + 1, up}, {j.np, down}} {
			o, err := j.measure(func(int) (time.Time, int, error) { return j.scale(step.np) })
			if err != nil {
				return err
			}
			step.row.outcomes = append(step.row.outcomes, o...)
		}
	}
	return nil
}

// measureAlone kills a rank of a job whose survivors train on without it
// (run with --np 1:N and no spare; torchft), runs times, with kill: alone
// is the survivors training on without it (a generation of np-1), grown
// is every rank training again once the killed rank's process is back
// (np), both from the kill.
func (s *session) measureAlone(kill func(int) (time.Time, int, error), np int, alone, grown *row) error {
	for i := range s.runs {
		s.beforeFault()
		if err := s.logs.poll(); err != nil {
			return err
		}
		at, _, err := kill(i)
		if err != nil {
			return err
		}
		s.steady = append(s.steady, intervals(s.logs.list(), s.from, at)...)
		if !s.recovered.IsZero() {
			s.transient = append(s.transient, intervals(s.logs.list(), s.recovered.Add(warmup), earliest(s.from, at))...)
		}
		// The smaller generation lasts as long as the start-up, or under
		// torchft a single step (the one in which the restarted replica
		// heals, if it is back before the lighthouse gives up on the
		// killed one): its first step is enough.
		settle := s.settle
		s.settle = 0
		o, err := s.wait(at, np-1)
		s.settle = settle
		if err != nil {
			return err
		}
		alone.outcomes = append(alone.outcomes, o)
		if o, err = s.wait(at, np); err != nil {
			return err
		}
		grown.outcomes = append(grown.outcomes, o)
	}
	return nil
}

// statusJSON is `coordinator status -o json` of the job.
func (j *coordinatorJob) statusJSON() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, j.cfg.coordinator, "status", "--etcd-endpoints", j.endpoint, "--job", "bench", "-o", "json").Output()
	if err != nil {
		return nil, fmt.Errorf("coordinator status: %w", err)
	}
	return out, nil
}

// status is `coordinator status -o json` of the job, read.
func (j *coordinatorJob) status() (printers.Status, error) {
	out, err := j.statusJSON()
	if err != nil {
		return printers.Status{}, err
	}
	var st printers.Status
	if err := json.Unmarshal(out, &st); err != nil {
		return printers.Status{}, fmt.Errorf("coordinator status: %w", err)
	}
	return st, nil
}
