//go:build !sidecaronly

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/internal/localrun"
	"github.com/elastictraining/coordinator/launcher"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
	"github.com/elastictraining/coordinator/trainerenv"
)

// runTTL is run's lease TTL, shorter than a cluster's sidecar's
// (presence.DefaultTTL): a node frozen whole is found only when its lease
// runs out, so the TTL is what the freeze costs the job. A cluster's TTL
// rides through the election of a new etcd leader (up to 2 s and the
// detection); run's etcd is one member in this process, and elects none.
const runTTL = 3 * time.Second

func newRunCommand(env lookupEnv) *cobra.Command {
	var (
		job                                jobOption
		np, listen, dataDir, logLevel      string
		preload                            string
		successPolicy                      string
		nproc, faultTolerance, maxRestarts int
		hang                               hangFlags
		ps, schedulers, spares             int
		framework, devices                 string
		frameworkFrom, devicesFrom         origin
		ttl, grace                         time.Duration
		withGloo                           int
		logs                               logOptions
		npOrigin                           origin
		faultToleranceErr                  error
		checkpoint                         checkpointOptions
	)
	cmd := &cobra.Command{
		Use:   "run --np N|MIN:MAX [--nproc-per-node K] [--log-dir DIR] -- CMD [ARGS...]",
		Short: "Run an elastic job on this machine: embedded etcd, a coordinator and the nodes",
		Long: `run is the whole system on one machine, like torchrun --standalone: an embedded
etcd, a coordinator, and one sidecar per node that np asks for, each with its
own ports and K training processes.

It prints the etcd endpoint it serves on (a free port unless
--listen-client-urls says otherwise), so that 'coordinator scale' and
'coordinator status' work from another terminal; scale starts or stops local
nodes. A node whose sidecar dies is started again. One line is printed per
generation: its size, why it exists and how long the restart took.

Each rank's output is shown prefixed with [rank N]. When --np's maximum times
--nproc-per-node is above 4, only rank 0's is shown, and every rank's goes to
log/NODE/rank-R.log (--log-dir, --tee). The choice is made at start: give
--log-dir for a job you will scale past 4 processes.

run exits 0 when the job succeeds, with the failed training process's exit
code when it fails, 127 or 126 at once when the command cannot be started, and
130 or 143 after SIGINT or SIGTERM, once every node has stopped (a second
signal kills them at once); 141 when the reader of its output has gone
(run ... | head), also once every node has stopped.

Without --data-dir, etcd's data goes to a directory in $TMPDIR that run
removes when it ends; a run killed with SIGKILL cannot, and the next run
removes what such runs left.`,
		Example: `  coordinator run --np 2 -- testdata/toytrainer.sh
  coordinator run --np 2:4 --nproc-per-node 2 --listen-client-urls http://127.0.0.1:2379 -- python train.py
  coordinator run --np 8 --log-dir logs --tee none -- python train.py`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || cmd.ArgsLenAtDash() > 0 {
				return usagef("no training command: put it after --, as in: coordinator run --np 2 -- python train.py")
			}
			if faultToleranceErr != nil {
				return faultToleranceErr
			}
			fw, err := trainerenv.ParseFramework(framework)
			if err != nil {
				return usageError{fmt.Errorf("%s: %w", frameworkFrom, err)}
			}
			nodeDevs, err := nodeDevices(devices, devicesFrom, env, filepath.Glob)
			if err != nil {
				return err
			}
			if nodeDevs, err = runDeviceLabels(nodeDevs, env); err != nil {
				return err
			}
			// The command may be a framework's launcher: the sidecars run
			// it once per node, or it cannot run under them.
			lc, err := trainerenv.LaunchCommandOf(args)
			if err != nil {
				return usageError{err}
			}
			if lc.Launcher == trainerenv.PaddleLaunch {
				// Each node's share of the devices is its processes': one
				// a process, as the launcher gives them.
				if nproc, err = launcherProcs(lc, 0, nproc, cmd.Flags().Changed("nproc-per-node")); err != nil {
					return err
				}
				if _, err := paddleLaunchFramework(fw, frameworkFrom); err != nil {
					return err
				}
				if ps > 0 || schedulers > 0 {
					return usagef("python -m paddle.distributed.launch runs a collective job under the sidecars: " +
						"for --ps or --schedulers give the training script itself")
				}
			}
			if fw == trainerenv.MindSpore && !cmd.Flags().Changed("schedulers") {
				schedulers = 1 // msrun starts one; so does run
			}
			if np == "" {
				return usagef("--np is required")
			}
			target, err := parseNP(np, npOrigin)
			if err != nil {
				return err
			}
			id, err := job.id()
			if err != nil {
				return err
			}
			switch {
			case nproc < 1 || nproc > membership.MaxNProc:
				return usagef("--nproc-per-node %d: want 1..%d", nproc, membership.MaxNProc)
			case ttl < presence.MinTTL:
				return usagef("--ttl %s: at least %s", ttl, presence.MinTTL)
			case withGloo < -1 || withGloo > 2:
				return usagef("--with-gloo %d: want 0, 1 or 2", withGloo)
			case grace < 0:
				return usagef("--grace-period %s: must not be negative", grace)
			case spares < 0:
				return usagef("--spares %d: must not be negative", spares)
			case spares > target.Max:
				return usagef("--spares %d: at most np's maximum, %d", spares, target.Max)
			}
			if _, err := checkpoint.validate(); err != nil {
				return err
			}
			spec := membership.DefaultSpec(target)
			spec.FaultTolerance, spec.MaxRestarts = faultTolerance, maxRestarts
			if err := hang.apply(&spec); err != nil {
				return err
			}
			spec.PS, spec.Schedulers, spec.Spares = ps, schedulers, spares
			spec.SuccessPolicy, spec.Name = membership.SuccessPolicy(successPolicy), job.specName(id)
			if err := spec.Validate(); err != nil {
				return usageError{specFlagError(err, npOrigin)}
			}
			// `run ... | head`: once the reader is gone, what run and
			// the ranks write is dropped, and the job stops as after
			// SIGTERM, with its grace (runSignals.outputGone).
			ctx, signals := signalContext(cmd.Context())
			defer signals.stop()
			stdout := &pipeOutput{w: cmd.OutOrStdout(), gone: signals.outputGone}
			stderr := &pipeOutput{w: cmd.ErrOrStderr(), gone: signals.outputGone}
			logger, err := newLogger(stderr, "run", logLevel)
			if err != nil {
				return err
			}
			mods, err := parsePreload(preload, origin{flag: "preload"})
			if err != nil {
				return err
			}
			ranks := target.Max * nproc
			sidecarArgs, note, err := runLogArgs(&logs, ranks)
			if err != nil {
				return err
			}
			// A command that cannot start fails here, in one line, before
			// anything starts: a restart would not mend it.
			if _, err := launcher.LookPath(args[0]); err != nil {
				var cannot *launcher.StartError
				errors.As(err, &cannot)
				return exitError{code: cannot.Code, msg: err.Error()}
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this program to start sidecars: %w", err)
			}
			exe = sidecarBinary(exe)
			if withGloo >= 0 {
				sidecarArgs = append(sidecarArgs, fmt.Sprintf("--with-gloo=%d", withGloo))
			}
			sidecarArgs = append(sidecarArgs, checkpoint.args()...)
			sidecarArgs = append(sidecarArgs, "--framework", fw.String())
			if len(mods) > 0 {
				sidecarArgs = append(sidecarArgs, "--preload", strings.Join(mods, ","))
			}
			code, err := localrun.Run(ctx, localrun.Config{
				Executable: exe, Job: id, Spec: spec, NProc: nproc, Command: args, Devices: nodeDevs, DataDir: dataDir, ClientURL: listen,
				TTL: ttl, Grace: grace, SidecarArgs: sidecarArgs, SidecarLogLevel: logLevel, Env: os.Environ(),
				Out: stdout, Err: stderr, Logger: logger, LogNote: note, KillNow: signals.again,
			})
			signals.stop()
			switch {
			case errors.Is(err, context.Canceled) && signals.first() != 0:
				return exitError{code: 128 + int(signals.first())}
			case err != nil:
				return err
			case code != 0:
				return exitError{code: code}
			}
			return nil
		},
	}
	// Flags end at the training command: its own flags are its own.
	cmd.Flags().SetInterspersed(false)
	fs := cmd.Flags()
	npOrigin = envString(fs, &np, "np", env, "", "nodes to run, N or MIN:MAX", "ELASTIC_NP", "PADDLE_ELASTIC_NP")
	job.register(fs, env, "default", jobVariables...)
	fs.IntVar(&nproc, "nproc-per-node", 1, "training processes per node")
	fs.IntVar(&spares, "spares", 0, "worker nodes to keep registered and warm beyond np, holding no rank: one takes a lost node's rank at once, and the node back becomes a spare")
	fs.IntVar(&ps, "ps", 0, "parameter-server nodes to run besides the workers (PaddlePaddle, MindSpore), one process each")
	fs.IntVar(&schedulers, "schedulers", 0, "scheduler nodes to run (MindSpore), 0 or 1; 1 by default with --framework mindspore")
	frameworkFrom = envString(fs, &framework, "framework", env, "auto", frameworkUsage, "ELASTIC_FRAMEWORK")
	devicesFrom = envString(fs, &devices, "devices", env, "auto", devicesUsage+"; run shares them out among its nodes' processes as one node", "ELASTIC_DEVICES")
	fs.StringVar(&listen, "listen-client-urls", "", "URL the embedded etcd serves on; a free localhost port if empty")
	fs.StringVar(&dataDir, "data-dir", "", "keep etcd's data here; a temporary directory if empty")
	faultTolerance, faultToleranceErr = envInt(env, membership.FaultToleranceRestart, "PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL")
	fs.IntVar(&faultTolerance, "fault-tolerance-level", faultTolerance,
		"0: a failure ends the job; 1: restart; 2: restart and replace the failing node"+envNote("PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL"))
	fs.IntVar(&maxRestarts, "max-restarts", membership.DefaultMaxRestarts, "restarts the job may spend on failures")
	hang.register(fs)
	fs.StringVar(&successPolicy, "success-policy", string(membership.SuccessAllWorkers), "AllWorkers or Rank0")
	fs.DurationVar(&ttl, "ttl", runTTL, "sidecars' lease TTL; what a frozen node costs the job")
	fs.DurationVar(&grace, "grace-period", launcher.DefaultGrace, "time between SIGTERM and SIGKILL when stopping training processes")
	fs.IntVar(&withGloo, "with-gloo", -1, "PaddlePaddle's withGloo, 0, 1 or 2: set PADDLE_WITH_GLOO and PADDLE_GLOO_RENDEZVOUS=3; --with-gloo alone is 1; "+
		"-1: Paddle's launcher's default, 1 with --ps, 0 otherwise")
	fs.Lookup("with-gloo").NoOptDefVal = "1"
	fs.StringVar(&logLevel, "log-level", "warn", "log level of the coordinator and sidecars")
	fs.StringVar(&preload, "preload", "", preloadUsage)
	logs.register(fs, "")
	checkpoint.register(fs, env, false)
	return cmd
}

// maxShownRanks is how many processes' output run shows by default; above
// it, only rank 0's, and every rank's goes to files.
const maxShownRanks = 4

// defaultRunLogDir is where run keeps every rank's output when there are
// too many to show, as paddle.distributed.launch does (its log/).
const defaultRunLogDir = "log"

// runLogArgs are the sidecars' log flags for a job of ranks processes, and
// the line run prints to say where the output goes ("" for none).
func runLogArgs(o *logOptions, ranks int) ([]string, string, error) {
	if o.dir == "" && ranks > maxShownRanks {
		o.dir = defaultRunLogDir
	}
	if o.tee == "" {
		o.tee = string(launcher.TeeAll)
		if ranks > maxShownRanks {
			o.tee = string(launcher.TeeRank0)
		}
	}
	logs, err := o.parse()
	if err != nil || logs == nil {
		return nil, "", err
	}
	args := []string{"--log-dir", logs.Dir, "--tee", string(logs.Tee), "--log-max-mb", strconv.Itoa(o.maxMB)}
	where := filepath.Join(logs.Dir, "NODE", "rank-R.log")
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, logs.Dir); err == nil && !strings.HasPrefix(rel, "..") {
			where = filepath.Join(rel, "NODE", "rank-R.log")
		}
	}
	shown := map[launcher.Tee]string{launcher.TeeAll: "every rank's output", launcher.TeeRank0: "rank 0's output", launcher.TeeNone: "no rank's output"}[logs.Tee]
	note := fmt.Sprintf("%s: the terminal shows %s; every rank's is in %s", english.Count(ranks, "process"), shown, where)
	return args, note, nil
}

// runSignals is what run was told by signals: the first one cancels the
// context, a second one asks for the nodes to be killed at once.
type runSignals struct {
	mu     sync.Mutex
	sig    syscall.Signal
	again  chan struct{}
	cancel context.CancelFunc
	stop   func()
}

func (s *runSignals) first() syscall.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sig
}

// outputGone stops the job as a first SIGPIPE would, but is never the
// second signal that kills the nodes at once: a write to a reader that has
// gone is not a person asking.
func (s *runSignals) outputGone() {
	s.mu.Lock()
	first := s.sig == 0
	if first {
		s.sig = syscall.SIGPIPE
	}
	s.mu.Unlock()
	if first {
		s.cancel()
	}
}

// signalContext is ctx, cancelled at the first SIGINT or SIGTERM, or once
// run's output has gone (outputGone).
func signalContext(parent context.Context) (context.Context, *runSignals) {
	ctx, cancel := context.WithCancel(parent)
	s := &runSignals{again: make(chan struct{}), cancel: cancel}
	ch := make(chan os.Signal, 2)
	// Asked for, SIGPIPE no longer ends the process at a write to a
	// broken standard output: the write fails with EPIPE, which
	// pipeOutput sees. The signal itself says nothing of which output
	// broke (any socket's peer that went, the embedded etcd's client's
	// say), so it is dropped.
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-ch:
				if sig == syscall.SIGPIPE {
					continue
				}
				s.mu.Lock()
				first := s.sig == 0
				if first {
					s.sig = sig.(syscall.Signal)
				}
				s.mu.Unlock()
				if first {
					cancel()
				} else {
					close(s.again)
					return
				}
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel()
		})
	}
	return ctx, s
}

// pipeOutput is one of run's outputs: once its reader has gone (EPIPE),
// it says so (gone) and drops what is written, so that the ranks' output,
// which run copies here, never blocks nor breaks the nodes while they stop.
type pipeOutput struct {
	w      io.Writer
	gone   func()
	broken atomic.Bool
}

func (p *pipeOutput) Write(b []byte) (int, error) {
	if p.broken.Load() {
		return len(b), nil
	}
	n, err := p.w.Write(b)
	if errors.Is(err, syscall.EPIPE) {
		if !p.broken.Swap(true) {
			p.gone()
		}
		return len(b), nil
	}
	return n, err
}

// sidecarBinary is the program the sidecars are started from: the
// sidecar's own binary next to this one (`make build` builds both), which
// starts sooner and holds less memory, when it is of the same build; this
// binary otherwise.
func sidecarBinary(self string) string {
	slim := filepath.Join(filepath.Dir(self), "coordinator-sidecar")
	out, err := exec.Command(slim, "version").Output()
	if err != nil || strings.TrimSpace(string(out)) != versionLine() {
		return self
	}
	return slim
}
