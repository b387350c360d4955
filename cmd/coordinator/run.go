//go:build !sidecaronly

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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

// runOptions are run's flags.
type runOptions struct {
	env                                lookupEnv
	job                                jobOption
	np, listen, dataDir, logLevel      string
	listenMetrics                      string
	preload                            string
	inPlace                            bool
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
}

func newRunCommand(env lookupEnv) *cobra.Command {
	o := &runOptions{env: env}
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

With --listen-metrics, run serves what serve and the sidecars export of the
job (the coordinator's elastic_job_* series, each node's elastic_sidecar_*
and elastic_rank_*) on /metrics at that address, and the job's page on
/jobs/JOB: deploy/monitoring's dashboard and alerts work against it.

Without --data-dir, etcd's data goes to a directory in $TMPDIR that run
removes when it ends; a run killed with SIGKILL cannot, and the next run
removes what such runs left.`,
		Example: `  coordinator run --np 2 -- testdata/toytrainer.sh
  coordinator run --np 2:4 --nproc-per-node 2 --listen-client-urls http://127.0.0.1:2379 -- python train.py
  coordinator run --np 8 --log-dir logs --tee none -- python train.py`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args) },
	}
	// Flags end at the training command: its own flags are its own.
	cmd.Flags().SetInterspersed(false)
	o.register(cmd.Flags())
	return cmd
}

func (o *runOptions) register(fs *pflag.FlagSet) {
	env := o.env
	o.npOrigin = envString(fs, &o.np, "np", env, "", "nodes to run, N or MIN:MAX", "ELASTIC_NP", "PADDLE_ELASTIC_NP")
	o.job.register(fs, env, "default", jobVariables...)
	fs.IntVar(&o.nproc, "nproc-per-node", 1, "training processes per node")
	fs.IntVar(&o.spares, "spares", 0, "worker nodes to keep registered and warm beyond np, holding no rank: one takes a lost node's rank at once, and the node back becomes a spare")
	fs.IntVar(&o.ps, "ps", 0, "parameter-server nodes to run besides the workers (PaddlePaddle, MindSpore), one process each")
	fs.IntVar(&o.schedulers, "schedulers", 0, "scheduler nodes to run (MindSpore), 0 or 1; 1 by default with --framework mindspore")
	o.frameworkFrom = envString(fs, &o.framework, "framework", env, "auto", frameworkUsage, "ELASTIC_FRAMEWORK")
	o.devicesFrom = envString(fs, &o.devices, "devices", env, "auto", devicesUsage+"; run shares them out among its nodes' processes as one node", "ELASTIC_DEVICES")
	fs.StringVar(&o.listen, "listen-client-urls", "", "URL the embedded etcd serves on; a free localhost port if empty")
	fs.StringVar(&o.dataDir, "data-dir", "", "keep etcd's data here; a temporary directory if empty")
	fs.StringVar(&o.listenMetrics, "listen-metrics", "", "serve the job's Prometheus metrics and its nodes', and the job's page, on this address (host:port); none if empty")
	o.faultTolerance, o.faultToleranceErr = envInt(env, membership.FaultToleranceRestart, "PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL")
	fs.IntVar(&o.faultTolerance, "fault-tolerance-level", o.faultTolerance,
		"0: a failure ends the job; 1: restart; 2: restart and replace the failing node"+envNote("PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL"))
	fs.IntVar(&o.maxRestarts, "max-restarts", membership.DefaultMaxRestarts, "restarts the job may spend on failures")
	o.hang.register(fs)
	fs.StringVar(&o.successPolicy, "success-policy", string(membership.SuccessAllWorkers), "AllWorkers or Rank0")
	fs.DurationVar(&o.ttl, "ttl", runTTL, "sidecars' lease TTL; what a frozen node costs the job")
	fs.DurationVar(&o.grace, "grace-period", launcher.DefaultGrace, "time between SIGTERM and SIGKILL when stopping training processes")
	fs.IntVar(&o.withGloo, "with-gloo", -1, "PaddlePaddle's withGloo, 0, 1 or 2: set PADDLE_WITH_GLOO and PADDLE_GLOO_RENDEZVOUS=3; --with-gloo alone is 1; "+
		"-1: Paddle's launcher's default, 1 with --ps, 0 otherwise")
	fs.Lookup("with-gloo").NoOptDefVal = "1"
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level of the coordinator and sidecars")
	fs.StringVar(&o.preload, "preload", "", preloadUsage)
	fs.BoolVar(&o.inPlace, "in-place", false, inPlaceUsage)
	o.logs.register(fs, "")
	o.checkpoint.register(fs, env, false)
	o.checkGivenValues(fs)
}

// checkGivenValues has the values given to run's own string flags checked
// before it runs.
func (o *runOptions) checkGivenValues(fs *pflag.FlagSet) {
	checkGiven(fs, "np", func() error { _, err := parseNP(o.np, o.npOrigin); return err })
	checkGiven(fs, "framework", func() error { _, err := parseFramework(o.framework, o.frameworkFrom); return err })
	checkGiven(fs, "devices", func() error { _, err := nodeDevices(o.devices, o.devicesFrom, o.env, filepath.Glob); return err })
	checkGiven(fs, "listen-client-urls", func() error { return checkEtcdURL("--listen-client-urls", o.listen, true, "http", "https") })
	checkGiven(fs, "listen-metrics", func() error { return checkListenAddress("--listen-metrics", o.listenMetrics) })
	checkGiven(fs, "success-policy", func() error { return checkSuccessPolicy(o.successPolicy) })
	checkGiven(fs, "log-level", func() error { return checkLogLevel(o.logLevel) })
	checkGiven(fs, "preload", func() error { _, err := parsePreload(o.preload, origin{flag: "preload"}); return err })
}

// runPlan is the job that run's flags and training command describe.
type runPlan struct {
	id        string
	spec      membership.Spec
	framework trainerenv.Framework
	devices   []string // each node's
}

// run runs the job of the flags and the training command args, and ends
// as the job ended.
func (o *runOptions) run(cmd *cobra.Command, args []string) error {
	plan, err := o.plan(cmd.Flags(), cmd.ArgsLenAtDash(), args)
	if err != nil {
		return err
	}
	// `run ... | head`: once the reader is gone, what run and
	// the ranks write is dropped, and the job stops as after
	// SIGTERM, with its grace (runSignals.outputGone).
	ctx, signals := signalContext(cmd.Context())
	defer signals.stop()
	stdout := &pipeOutput{w: cmd.OutOrStdout(), gone: signals.outputGone}
	stderr := &pipeOutput{w: cmd.ErrOrStderr(), gone: signals.outputGone}
	cfg, err := o.localConfig(plan, args, stderr)
	if err != nil {
		return err
	}
	cfg.Out, cfg.Err, cfg.KillNow = stdout, stderr, signals.again
	code, err := localrun.Run(ctx, cfg)
	signals.stop()
	return runEnded(code, err, signals.first())
}

// plan reads the flags and the training command, or says in one line
// what is wrong with them; dash is where -- was, -1 for nowhere.
func (o *runOptions) plan(fs *pflag.FlagSet, dash int, args []string) (runPlan, error) {
	var p runPlan
	if len(args) == 0 || dash > 0 {
		return p, usagef("no training command: put it after --, as in: coordinator run --np 2 -- python train.py")
	}
	if o.faultToleranceErr != nil {
		return p, o.faultToleranceErr
	}
	var err error
	if p.framework, p.devices, err = o.frameworkAndDevices(); err != nil {
		return p, err
	}
	if err := o.fitLauncher(fs, args, p.framework); err != nil {
		return p, err
	}
	p.id, p.spec, err = o.jobSpec()
	return p, err
}

// frameworkAndDevices reads --framework and --devices.
func (o *runOptions) frameworkAndDevices() (trainerenv.Framework, []string, error) {
	fw, err := parseFramework(o.framework, o.frameworkFrom)
	if err != nil {
		return fw, nil, err
	}
	nodeDevs, err := nodeDevices(o.devices, o.devicesFrom, o.env, filepath.Glob)
	if err != nil {
		return fw, nil, err
	}
	nodeDevs, err = runDeviceLabels(nodeDevs, o.env)
	return fw, nodeDevs, err
}

// fitLauncher fits the flags to the training command, which may be a
// framework's launcher: the sidecars run it once per node, or it cannot
// run under them.
func (o *runOptions) fitLauncher(fs *pflag.FlagSet, args []string, fw trainerenv.Framework) error {
	lc, err := trainerenv.LaunchCommandOf(args)
	if err != nil {
		return usageError{err}
	}
	if lc.Launcher == trainerenv.PaddleLaunch {
		// Each node's share of the devices is its processes': one
		// a process, as the launcher gives them.
		if o.nproc, err = launcherProcs(lc, 0, o.nproc, fs.Changed("nproc-per-node")); err != nil {
			return err
		}
		if fw, err = paddleLaunchFramework(fw, o.frameworkFrom); err != nil {
			return err
		}
		if o.ps > 0 || o.schedulers > 0 {
			return usagef("python -m paddle.distributed.launch runs a collective job under the sidecars: " +
				"for --ps or --schedulers give the training script itself")
		}
	}
	if fw == trainerenv.MindSpore && !fs.Changed("schedulers") {
		o.schedulers = 1 // msrun starts one; so does run
	}
	return checkFrameworkInstalled(context.Background(), fw, args)
}

// jobSpec is the job's id and the spec run stores, from the flags.
func (o *runOptions) jobSpec() (string, membership.Spec, error) {
	if o.np == "" {
		return "", membership.Spec{}, usagef("--np is required")
	}
	target, err := parseNP(o.np, o.npOrigin)
	if err != nil {
		return "", membership.Spec{}, err
	}
	id, err := o.job.id()
	if err != nil {
		return "", membership.Spec{}, err
	}
	if err := o.checkCounts(target); err != nil {
		return "", membership.Spec{}, err
	}
	if _, err := o.checkpoint.validate(); err != nil {
		return "", membership.Spec{}, err
	}
	spec := membership.DefaultSpec(target)
	spec.FaultTolerance, spec.MaxRestarts = o.faultTolerance, o.maxRestarts
	if err := o.hang.apply(&spec); err != nil {
		return "", membership.Spec{}, err
	}
	spec.PS, spec.Schedulers, spec.Spares = o.ps, o.schedulers, o.spares
	spec.SuccessPolicy, spec.Name = membership.SuccessPolicy(o.successPolicy), o.job.specName(id)
	if err := spec.Validate(); err != nil {
		return "", membership.Spec{}, usageError{specFlagError(err, o.npOrigin)}
	}
	return id, spec, nil
}

// checkCounts checks the flags that count and time, for a job of target
// workers.
func (o *runOptions) checkCounts(target membership.NP) error {
	switch {
	case o.nproc < 1 || o.nproc > membership.MaxNProc:
		return usagef("--nproc-per-node %d: want 1..%d", o.nproc, membership.MaxNProc)
	case o.ttl < presence.MinTTL:
		return usagef("--ttl %s: at least %s", o.ttl, presence.MinTTL)
	case o.withGloo < -1 || o.withGloo > 2:
		return usagef("--with-gloo %d: want 0, 1 or 2", o.withGloo)
	case o.grace < 0:
		return usagef("--grace-period %s: must not be negative", o.grace)
	case o.spares < 0:
		return usagef("--spares %d: must not be negative", o.spares)
	case o.spares > target.Max:
		return usagef("--spares %d: at most np's maximum, %d", o.spares, target.Max)
	}
	return nil
}

// localConfig is what localrun runs: the plan's job, the training command
// args, the sidecars as the flags ask, logging to stderr.
func (o *runOptions) localConfig(plan runPlan, args []string, stderr io.Writer) (localrun.Config, error) {
	logger, err := newLogger(stderr, "run", o.logLevel)
	if err != nil {
		return localrun.Config{}, err
	}
	mods, err := parsePreload(o.preload, origin{flag: "preload"})
	if err != nil {
		return localrun.Config{}, err
	}
	sidecarArgs, note, err := runLogArgs(&o.logs, plan.spec.NP.Max*o.nproc)
	if err != nil {
		return localrun.Config{}, err
	}
	// A command that cannot start fails here, in one line, before
	// anything starts: a restart would not mend it.
	if _, err := launcher.LookPath(args[0]); err != nil {
		var cannot *launcher.StartError
		errors.As(err, &cannot)
		return localrun.Config{}, exitError{code: cannot.Code, msg: err.Error()}
	}
	exe, err := os.Executable()
	if err != nil {
		return localrun.Config{}, fmt.Errorf("find this program to start sidecars: %w", err)
	}
	var metrics net.Listener
	if o.listenMetrics != "" {
		if metrics, err = net.Listen("tcp", o.listenMetrics); err != nil {
			return localrun.Config{}, usagef("--listen-metrics %s: %v", o.listenMetrics, err)
		}
	}
	return localrun.Config{
		Metrics:    metrics,
		Executable: sidecarBinary(exe), Job: plan.id, Spec: plan.spec, NProc: o.nproc, Command: args, Devices: plan.devices,
		DataDir: o.dataDir, ClientURL: o.listen, TTL: o.ttl, Grace: o.grace, SidecarArgs: o.sidecarArgs(sidecarArgs, plan.framework, mods),
		SidecarLogLevel: o.logLevel, Env: os.Environ(), Logger: logger, LogNote: note,
	}, nil
}

// sidecarArgs are the flags each sidecar is started with: its log flags
// logArgs, and those the nodes share.
func (o *runOptions) sidecarArgs(logArgs []string, fw trainerenv.Framework, preload []string) []string {
	args := logArgs
	if o.withGloo >= 0 {
		args = append(args, fmt.Sprintf("--with-gloo=%d", o.withGloo))
	}
	args = append(args, o.checkpoint.args()...)
	args = append(args, "--framework", fw.String())
	if len(preload) > 0 {
		args = append(args, "--preload", strings.Join(preload, ","))
	}
	if o.inPlace {
		args = append(args, "--in-place")
	}
	return args
}

// runEnded is how run ends for a job that localrun ended with code and
// err, after the signal first (0 for none).
func runEnded(code int, err error, first syscall.Signal) error {
	switch {
	case errors.Is(err, context.Canceled) && first != 0:
		return exitError{code: 128 + int(first)}
	case err != nil:
		return err
	case code != 0:
		return exitError{code: code}
	}
	return nil
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
