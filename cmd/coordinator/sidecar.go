package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/launcher"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
	"github.com/elastictraining/coordinator/sidecar"
	"github.com/elastictraining/coordinator/trainerenv"
)

type sidecarOptions struct {
	etcd           etcdFlags
	job            jobOption
	np             string
	npOrigin       origin
	role           string
	roleOrigin     origin
	ttlOrigin      origin
	ftOrigin       origin
	nodeID         string
	ordinal        int
	host           string
	port           int
	masterPort     int
	nproc          int
	ttl            time.Duration
	fenceMargin    time.Duration
	cgroup         string
	grace          time.Duration
	faultTolerance int
	maxRestarts    int
	spares         int
	hang           hangFlags
	ps             int
	schedulers     int
	heter          int
	successPolicy  string
	cleanPodPolicy string
	gloo           int
	waitTimeout    time.Duration
	logLevel       string
	pod            string // the Kubernetes pod, from POD_NAME
	podUID         string // from POD_UID
	namespace      string // from POD_NAMESPACE
	intranet       string
	holdWhenDone   bool
	inPlace        bool
	quietResult    bool
	logs           logOptions
	listenMetrics  string
	stateDir       string
	getenv         func(string) string
	checkpoint     checkpointOptions
	preload        string
	preloadOrigin  origin
	framework      string
	frameworkFrom  origin
	devices        string
	devicesFrom    origin
	env            lookupEnv
	nprocSet       bool  // --nproc-per-node was given
	envErr         error // a variable that cannot be read
	// opts are set by validate from the flags and the command.
	opts trainerenv.Options
}

func newSidecarCommand(env lookupEnv) *cobra.Command {
	o := &sidecarOptions{pod: fromEnv(env, "", "POD_NAME"), podUID: fromEnv(env, "", "POD_UID"), namespace: fromEnv(env, "", "POD_NAMESPACE"),
		getenv: func(name string) string { return fromEnv(env, "", name) }, env: env}
	cmd := &cobra.Command{
		Use:   "sidecar --etcd-endpoints URLS --job ID [flags] -- CMD [ARGS...]",
		Short: "Register this node and run the training command as the job's generations ask",
		Long: `sidecar runs in every training pod. It registers the node in etcd under a lease,
then follows the job's plan: it stops the training processes when a generation
ends, acks, and starts them again with the new rank table in their environment
(RANK, WORLD_SIZE, MASTER_ADDR, PADDLE_TRAINER_ENDPOINTS, MS_SCHED_HOST, ...).

When its lease cannot be renewed for a TTL it kills the processes (it has been
fenced out) and registers again once etcd is back. On SIGTERM it stops the
processes and revokes its lease, so the job sees it leave at once. It exits 0
when the job succeeds and with the training command's exit code when it fails;
a command that cannot be started (not found, not executable) fails the job at
once with 127 or 126, spending no restart.

--np, --ps and the fault tolerance flags set the job's spec only if the job has
none yet. PaddlePaddle's elastic variables are read as defaults, and its
launcher's spelling works: --elastic_server, --job_id, --np=N, --nproc_per_node,
--log_dir, and the training command without -- before it, so a pod spec written
for paddle.distributed.launch works unchanged.

With --log-dir every process's output also goes to DIR/NODE/rank-R.log (ps-N.log
for a parameter server), one file a rank, each generation after a line naming
it; --tee says whose output still reaches the terminal.`,
		Example: `  coordinator sidecar --etcd-endpoints http://etcd:2379 --job resnet --np 2:4 -- python train.py
  coordinator sidecar --job wide-deep --role ps --ps 2 --np 2 -- python train.py   # env PADDLE_ELASTIC_SERVER
  coordinator sidecar --job ms-wd --role scheduler --np 4 --port 2222 -- python train.py   # MindSpore; workers: --schedulers 1
  coordinator sidecar --elastic_server=127.0.0.1:2379 --np=2 --job_id=XXXXXX train_fleet_dygraph_ckpt.py   # PaddlePaddle's spelling`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || cmd.ArgsLenAtDash() > 0 {
				return usagef("no training command: put it after --, as in: coordinator sidecar --job ID -- python train.py")
			}
			o.nprocSet = cmd.Flags().Changed("nproc-per-node")
			return o.run(cmd, args)
		},
	}
	// Flags end at the training command: its own flags are its own.
	cmd.Flags().SetInterspersed(false)
	fs := cmd.Flags()
	o.etcd.register(fs, env)
	o.job.register(fs, env, "", jobVariables...)
	o.npOrigin = envString(fs, &o.np, "np", env, "", "target worker nodes, N or MIN:MAX; sets the job's spec if it has none", "ELASTIC_NP", "PADDLE_ELASTIC_NP")
	fs.StringVar(&o.role, "role", fromEnv(env, "worker", "ELASTIC_ROLE"), "this node's role: worker, ps, scheduler (MindSpore) or heter (PaddlePaddle)"+envNote("ELASTIC_ROLE"))
	o.roleOrigin = fromVariable(fs, "role", env, "ELASTIC_ROLE")
	fs.StringVar(&o.nodeID, "node-id", fromEnv(env, "", "ELASTIC_NODE_ID", "POD_NAME"), "stable id of this node; the host name if empty"+envNote("ELASTIC_NODE_ID", "POD_NAME"))
	fs.IntVar(&o.ordinal, "ordinal", -1,
		"the node's place in its workload (a StatefulSet pod's ordinal); a shrinking job keeps the lowest. -1: the number that ends the node id, if any")
	fs.StringVar(&o.host, "host", fromEnv(env, "", "POD_IP"), "address other nodes reach this node at; the first non-loopback address if empty"+envNote("POD_IP"))
	fs.IntVar(&o.port, "port", 36000, "first endpoint port; process l listens on port+l")
	fs.IntVar(&o.masterPort, "master-port", 29500, "rendezvous port (MASTER_PORT) if this node becomes rank 0")
	fs.IntVar(&o.nproc, "nproc-per-node", 1, "training processes on this node")
	ttl, ttlErr := envDuration(env, presence.DefaultTTL, "ELASTIC_TTL")
	fs.DurationVar(&o.ttl, "ttl", ttl, "lease TTL: how long a silent node keeps its place (at least 2s)"+envNote("ELASTIC_TTL"))
	o.ttlOrigin = fromVariable(fs, "ttl", env, "ELASTIC_TTL")
	fs.DurationVar(&o.fenceMargin, "fence-margin", 0,
		"how long before the lease could expire the node kills its processes; 0: a tenth of the TTL, at least 250ms")
	fs.StringVar(&o.cgroup, "cgroup", "auto", "auto: run the training processes in a cgroup v2 of their own where one is writable; off: never")
	fs.DurationVar(&o.grace, "grace-period", launcher.DefaultGrace, "time between SIGTERM and SIGKILL when stopping the training processes")
	faultTolerance, ftErr := envInt(env, membership.FaultToleranceRestart, "PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL")
	fs.IntVar(&o.faultTolerance, "fault-tolerance-level", faultTolerance,
		"0: a failure ends the job; 1: restart; 2: restart and replace the failing node"+envNote("PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL"))
	o.ftOrigin = fromVariable(fs, "fault-tolerance-level", env, "PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL")
	fs.IntVar(&o.maxRestarts, "max-restarts", membership.DefaultMaxRestarts, "restarts a job may spend on failures")
	fs.IntVar(&o.spares, "spares", 0, "spare workers the job keeps registered beyond np, holding no rank (a spec setting: whoever starts the nodes starts them)")
	o.hang.register(fs)
	fs.IntVar(&o.ps, "ps", 0, "parameter-server nodes of the job")
	fs.IntVar(&o.heter, "heter", 0, "heterogeneous trainer nodes of the job (PaddlePaddle's heter parameter servers)")
	fs.IntVar(&o.schedulers, "schedulers", 0, "scheduler nodes of the job (MindSpore), 0 or 1; 1 for a node of --role scheduler")
	fs.StringVar(&o.successPolicy, "success-policy", string(membership.SuccessAllWorkers), "AllWorkers or Rank0")
	fs.StringVar(&o.cleanPodPolicy, "clean-pod-policy", string(membership.CleanPodNever), "Always, Never, OnFailure or OnCompletion (for the Kubernetes bridge)")
	fs.IntVar(&o.gloo, "with-gloo", -1, "PaddlePaddle's withGloo: 1 (workers) or 2 (workers and servers) sets PADDLE_WITH_GLOO and PADDLE_GLOO_RENDEZVOUS=3, and in a job with parameter servers PADDLE_GLOO_HTTP_ENDPOINT, the first server's store; --with-gloo alone is 1; "+
		"-1: Paddle's launcher's default, 1 in a job with parameter servers, 0 otherwise")
	fs.Lookup("with-gloo").NoOptDefVal = "1"
	waitTimeout, waitErr := envSeconds(env, "PADDLE_ELASTIC_TIMEOUT")
	o.envErr = errors.Join(ttlErr, ftErr, waitErr)
	fs.DurationVar(&o.waitTimeout, "wait-timeout", waitTimeout,
		"give up after waiting this long without running; 0 waits forever"+envNote("PADDLE_ELASTIC_TIMEOUT"))
	fs.StringVar(&o.intranet, "intranet", fromEnv(env, "PodIP", "ELASTIC_INTRANET"),
		"how other nodes reach this one on Kubernetes: PodIP, or Service for the pod's headless Service that the bridge keeps (POD_NAME.POD_NAMESPACE.svc)"+envNote("ELASTIC_INTRANET"))
	fs.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.BoolVar(&o.inPlace, "in-place", slices.Contains([]string{"1", "true"}, fromEnv(env, "", "ELASTIC_IN_PLACE")), inPlaceUsage+envNote("ELASTIC_IN_PLACE"))
	fs.BoolVar(&o.holdWhenDone, "hold-when-done", false,
		"once the job has ended, wait for SIGTERM instead of exiting: a pod that must keep running (a StatefulSet's) shows the job's end, not a restart loop")
	fs.BoolVar(&o.quietResult, "quiet-result", false, "exit with the job's code without printing its result (run prints it once for every node)")
	_ = fs.MarkHidden("quiet-result")
	o.logs.register(fs, "all")
	fs.StringVar(&o.stateDir, "state-dir", fromEnv(env, "", "ELASTIC_STATE_DIR"),
		"where the sidecar keeps what its successor on this machine needs to take the node back at once (a file per job and node); "+
			"empty: $XDG_RUNTIME_DIR/elastic-sidecar, or elastic-sidecar-UID in the temporary directory"+envNote("ELASTIC_STATE_DIR"))
	fs.StringVar(&o.listenMetrics, "listen-metrics", "", "serve this node's Prometheus metrics on this address (host:port); none if empty")
	o.checkpoint.register(fs, env, true)
	o.preloadOrigin = envString(fs, &o.preload, "preload", env, "", preloadUsage, "ELASTIC_PRELOAD")
	o.frameworkFrom = envString(fs, &o.framework, "framework", env, "auto", frameworkUsage, "ELASTIC_FRAMEWORK")
	o.devicesFrom = envString(fs, &o.devices, "devices", env, "auto", devicesUsage, "ELASTIC_DEVICES")
	o.checkGivenValues(fs)
	return cmd
}

// frameworkUsage is the help of --framework, for run and sidecar.
const frameworkUsage = "whose launcher's variables the processes get, exactly: pytorch (torchrun's), paddle " +
	"(paddle.distributed.launch's) or mindspore (msrun's); auto: every framework's, torchrun's meaning where names meet, " +
	"and paddle where the command is python -m paddle.distributed.launch"

// envInt reads a whole number from a variable, or def if unset.
func envInt(env lookupEnv, def int, name string) (int, error) {
	v := fromEnv(env, "", name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return def, usagef("%s=%q: want a whole number", name, v)
	}
	return n, nil
}

// envDuration reads a duration like 10s from a variable, or def if unset.
func envDuration(env lookupEnv, def time.Duration, name string) (time.Duration, error) {
	v := fromEnv(env, "", name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return def, usagef("%s=%q: want a duration like 10s", name, v)
	}
	return d, nil
}

// envSeconds reads a whole number of seconds, as PaddlePaddle writes them.
func envSeconds(env lookupEnv, name string) (time.Duration, error) {
	v := fromEnv(env, "", name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, usagef("%s=%q: want a whole number of seconds", name, v)
	}
	return time.Duration(n) * time.Second, nil
}

// node is the record this sidecar registers.
func (o *sidecarOptions) node() (membership.Node, error) {
	role, err := o.parseRole()
	if err != nil {
		return membership.Node{}, err
	}
	if o.nproc < 1 || o.nproc > membership.MaxNProc {
		return membership.Node{}, usagef("--nproc-per-node %d: want 1..%d", o.nproc, membership.MaxNProc)
	}
	if o.port < 1 || o.port+o.nproc-1 > 65535 || o.masterPort < 1 || o.masterPort > 65535 {
		return membership.Node{}, usagef("--port %d, --master-port %d: out of range", o.port, o.masterPort)
	}
	if o.nodeID == "" {
		if o.nodeID, err = os.Hostname(); err != nil {
			return membership.Node{}, fmt.Errorf("host name for --node-id: %w", err)
		}
	}
	if err := checkNodeID(o.nodeID); err != nil {
		return membership.Node{}, err
	}
	switch o.intranet {
	case "PodIP":
	case "Service":
		if o.pod == "" || o.namespace == "" {
			return membership.Node{}, usagef("--intranet Service needs POD_NAME and POD_NAMESPACE (from the downward API)")
		}
		o.host = o.pod + "." + o.namespace + ".svc"
	default:
		return membership.Node{}, usagef("--intranet %q: want PodIP or Service", o.intranet)
	}
	if o.host == "" {
		o.host = firstAddress()
	}
	n := membership.Node{ID: o.nodeID, Role: role, Host: o.host, NProc: o.nproc, MasterPort: o.masterPort, Pod: o.pod, PodUID: o.podUID,
		Started: time.Now()}
	switch {
	case o.ordinal >= 0:
		n.Ordinal = &o.ordinal
	case o.ordinal < -1:
		return membership.Node{}, usagef("--ordinal %d: want -1 or more", o.ordinal)
	default:
		n.Ordinal = trailingNumber(o.nodeID)
	}
	for l := range o.nproc {
		n.Ports = append(n.Ports, o.port+l)
	}
	return n, nil
}

// spec is the spec this sidecar stores if the job has none, or nil without
// --np. Every flag of the spec is checked, --np or not: a bad one is a
// usage error at once, not a surprise when the job's spec is written.
func (o *sidecarOptions) spec(name string) (*membership.Spec, error) {
	np := membership.NP{Min: 1, Max: 1}
	if o.np != "" {
		var err error
		if np, err = parseNP(o.np, o.npOrigin); err != nil {
			return nil, err
		}
	}
	s := membership.DefaultSpec(np)
	s.PS, s.Schedulers, s.Heter, s.FaultTolerance, s.MaxRestarts = o.ps, o.schedulers, o.heter, o.faultTolerance, o.maxRestarts
	s.Spares = o.spares
	if o.role == string(membership.RoleScheduler) {
		s.Schedulers = 1
	}
	s.SuccessPolicy, s.CleanPodPolicy = membership.SuccessPolicy(o.successPolicy), membership.CleanPodPolicy(o.cleanPodPolicy)
	s.Name = name
	if err := o.hang.apply(&s); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		err = specFlagError(err, o.npOrigin)
		if rest, ok := strings.CutPrefix(err.Error(), "--fault-tolerance-level "); ok {
			err = fmt.Errorf("%s %s", o.ftOrigin, rest) // the variable, if it was one
		}
		return nil, usageError{err}
	}
	if o.np == "" {
		return nil, nil
	}
	return &s, nil
}

// specFlagError names the flag behind a spec field in err.
func specFlagError(err error, np origin) error {
	msg := err.Error()
	for field, flag := range map[string]string{
		"ps ": "--ps ", "schedulers ": "--schedulers ", "heter ": "--heter ", "faultTolerance ": "--fault-tolerance-level ",
		"maxRestarts ": "--max-restarts ", "successPolicy ": "--success-policy ", "cleanPodPolicy ": "--clean-pod-policy ",
		"spares ": "--spares ",
	} {
		if strings.HasPrefix(msg, field) {
			return errors.New(flag + strings.TrimPrefix(msg, field))
		}
	}
	if errors.Is(err, membership.ErrInvalidNP) {
		return fmt.Errorf("%s: %w", np, err)
	}
	return err
}

// validate checks every flag that needs no etcd, so that a bad one is one
// line at start.
func (o *sidecarOptions) validate(command []string) (jobID string, node membership.Node, spec *membership.Spec, err error) {
	if o.envErr != nil {
		return "", node, nil, o.envErr
	}
	if jobID, err = o.job.id(); err != nil {
		return "", node, nil, err
	}
	if err := o.processOptions(command); err != nil {
		return "", node, nil, err
	}
	if node, err = o.node(); err != nil {
		return "", node, nil, err
	}
	if spec, err = o.spec(o.job.specName(jobID)); err != nil {
		return "", node, nil, err
	}
	switch {
	case o.ttl < presence.MinTTL:
		return "", node, nil, usagef("%s %s: at least %s", o.ttlOrigin, o.ttl, presence.MinTTL)
	case o.fenceMargin < 0 || o.fenceMargin >= o.ttl/2:
		return "", node, nil, usagef("--fence-margin %s: want 0 or a duration below half the TTL %s", o.fenceMargin, o.ttl)
	case o.cgroup != "auto" && o.cgroup != "off":
		return "", node, nil, usagef("--cgroup %q: want auto or off", o.cgroup)
	case o.gloo < -1 || o.gloo > 2:
		return "", node, nil, usagef("--with-gloo %d: want 0, 1 or 2", o.gloo)
	case o.grace < 0:
		return "", node, nil, usagef("--grace-period %s: must not be negative", o.grace)
	case o.waitTimeout < 0:
		return "", node, nil, usagef("--wait-timeout %s: must not be negative", o.waitTimeout)
	}
	if hclog.LevelFromString(o.logLevel) == hclog.NoLevel {
		return "", node, nil, usagef("--log-level %q: want trace, debug, info, warn or error", o.logLevel)
	}
	if _, err := o.logs.parse(); err != nil {
		return "", node, nil, err
	}
	if _, err := o.checkpoint.validate(); err != nil {
		return "", node, nil, err
	}
	if _, err := parsePreload(o.preload, o.preloadOrigin); err != nil {
		return "", node, nil, err
	}
	return jobID, node, spec, nil
}

func (o *sidecarOptions) run(cmd *cobra.Command, command []string) error {
	jobID, node, spec, err := o.validate(command)
	if err != nil {
		return err
	}
	logs, _ := o.logs.parse()
	preload, _ := parsePreload(o.preload, o.preloadOrigin)
	if logs != nil {
		logs.Dir = filepath.Join(logs.Dir, node.ID)
	}
	logger, err := newLogger(cmd.ErrOrStderr(), "sidecar", o.logLevel)
	if err != nil {
		return err
	}

	// SIGTERM and SIGINT make the node leave; the training processes get
	// the grace period.
	ctx, cli, keys, stop, err := o.etcd.untilSignalled(cmd.Context())
	if err != nil {
		return err
	}
	defer stop()

	// The training processes run under a guard, this binary re-executed;
	// what is left of them when a guard dies is re-parented to this process.
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary for the process guard: %w", err)
	}
	if err := guard.BecomeSubreaper(); err != nil {
		logger.Warn("not a child subreaper; processes orphaned by a dead guard go to init", "error", err)
	}
	if o.cgroup == "auto" {
		if n := guard.KillLeftovers(); n > 0 {
			logger.Warn("killed the processes a dead guard left running", "cgroups", n)
		}
	}
	keeper, err := o.takeBack(ctx, cli, keys, jobID, node.ID, logger)
	if err != nil {
		return err
	}
	// Deferred before the launcher's Close, so run after it: the file
	// goes once nothing of the node runs.
	defer keeper.Close(true)
	var observer sidecar.Observer
	if o.listenMetrics != "" {
		stopMetrics, m, err := serveSidecarMetrics(o.listenMetrics, jobID, node.ID, logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
		observer = m
	}
	ckpt, ckptEnv, err := o.checkpoint.start(ctx, cli, keys, jobID, &node, logger)
	if err != nil {
		return err
	}
	defer o.checkpoint.close()
	var agent *sidecar.Agent
	processes := &sidecar.Processes{Logger: logger}
	env := os.Environ()
	if ckptEnv.PythonPath != "" {
		// A warm interpreter imports its preloads in this environment,
		// before a generation's: the module elastic must be on its path.
		env = append(slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, trainerenv.PythonPath+"=") }),
			trainerenv.PythonPath+"="+ckptEnv.PythonPath)
	}
	l, err := launcher.New(launcher.Config{
		Command: command, Env: env, Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(), Logger: logger,
		Guard: []string{self, "guard", "--cgroup", o.cgroup}, Logs: logs, Preload: preload, InPlace: o.inPlace,
		OnFenced: func(lease int64) { agent.LeaseFenced(lease) },
		OnGuard:  keeper.Guard,
		OnHung:   processes.Observe, OnProgress: processes.Observe,
	})
	if err != nil {
		return usageError{err}
	}
	defer l.Close()
	if len(preload) > 0 || o.inPlace {
		// One warm interpreter a process the sidecar starts: one for a
		// framework's launcher, which starts the node's.
		warm := node.NProc
		if o.opts.Launcher != trainerenv.NoLauncher {
			warm = 1
		}
		prewarm(ctx, l, warm, logger)
	}
	opts := o.opts
	opts.Checkpoint = ckptEnv
	opts.Inherited = func(name string) bool {
		return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
	}
	if opts.Launcher != trainerenv.NoLauncher {
		logger.Info("the command is a framework's launcher; it runs once per node and starts the node's processes",
			"launcher", opts.Launcher, "processes", node.NProc)
	}
	processes.Launcher, processes.Options = l, opts
	var workload sidecar.Workload = processes
	var beforeLeave func(context.Context)
	if ckpt != nil {
		defer ckpt.Close()
		workload = watchedWorkload{checkpointedWorkload{Workload: workload, store: ckpt}, processes}
		beforeLeave = ckpt.WriteDisk
	}
	agent, err = sidecar.New(sidecar.Config{
		Place: presence.Place{Client: cli, Keys: keys, Job: jobID, Node: node, TTL: o.ttl, FenceMargin: o.fenceMargin}, Spec: spec,
		Workload: workload, StopGrace: o.grace, WaitTimeout: o.waitTimeout,
		Observer: observer, Logger: logger, OnLease: keeper.Lease, BeforeLeave: beforeLeave, Notes: notesFor(logs, cmd.ErrOrStderr()),
	})
	if err != nil {
		return usageError{err}
	}
	if ckpt != nil {
		ckpt.Start(agent)
	}
	res, err := agent.Run(ctx)
	if o.holdWhenDone && err == nil && ctx.Err() == nil {
		logger.Info("job ended; holding until stopped", "phase", res.Phase, "exit_code", res.ExitCode)
		<-ctx.Done()
		return nil
	}
	switch {
	case errors.Is(err, sidecar.ErrLeft):
		logger.Info("left the job")
		return nil
	case err != nil:
		return err
	case res.Phase == membership.JobSucceeded:
		return nil
	case o.quietResult:
		return exitError{code: res.ExitCode}
	default:
		return exitError{code: res.ExitCode, msg: fmt.Sprintf("job %s failed: %s", o.job.displayName(jobID), res.Message)}
	}
}

// processOptions reads what decides the processes' environment: the
// framework, the node's devices, and the command, which may be a
// framework's launcher; its --nproc_per_node is the node's when the
// sidecar's is not given.
func (o *sidecarOptions) processOptions(command []string) error {
	fw, err := parseFramework(o.framework, o.frameworkFrom)
	if err != nil {
		return err
	}
	devices, err := nodeDevices(o.devices, o.devicesFrom, o.env, filepath.Glob)
	if err != nil {
		return err
	}
	lc, err := trainerenv.LaunchCommandOf(command)
	if err != nil {
		return usageError{err}
	}
	if lc.Launcher == trainerenv.PaddleLaunch {
		if fw, err = paddleLaunchFramework(fw, o.frameworkFrom); err != nil {
			return err
		}
		if o.role != string(membership.RoleWorker) {
			return usagef("python -m paddle.distributed.launch runs a collective job's workers under the sidecar; "+
				"for a %s node give the training script itself", o.role)
		}
		n, err := launcherProcs(lc, len(devices), o.nproc, o.nprocSet)
		if err != nil {
			return err
		}
		o.nproc = n
	}
	o.opts = trainerenv.Options{Gloo: o.gloo, Framework: fw, Launcher: lc.Launcher, Devices: devices}
	return checkFrameworkInstalled(context.Background(), fw, command)
}

// paddleLaunchFramework is the framework of a command that is Paddle's
// launcher: paddle, whatever auto would be; another one named is an error.
func paddleLaunchFramework(fw trainerenv.Framework, from origin) (trainerenv.Framework, error) {
	if fw != trainerenv.AnyFramework && fw != trainerenv.Paddle {
		return fw, usagef("%s %s: the command is PaddlePaddle's launcher", from, fw)
	}
	return trainerenv.Paddle, nil
}

// launcherProcs is the number of processes a node whose command is Paddle's
// launcher runs: its --nproc_per_node, else one a device of its --devices
// or of the node, as the launcher itself decides
// (launch/controllers/controller.py, pod_replicas); the sidecar's
// --nproc-per-node (nproc, given if set) must agree.
func launcherProcs(lc trainerenv.LaunchCommand, devices, nproc int, set bool) (int, error) {
	n := lc.NProcPerNode
	if n == 0 {
		n = lc.Devices
	}
	if n == 0 && !set {
		n = devices
	}
	switch {
	case n == 0:
		return nproc, nil
	case set && nproc != n:
		return 0, usagef("--nproc-per-node %d, but the launcher's --nproc_per_node is %d: give one", nproc, n)
	}
	return n, nil
}

// prewarmWait bounds how long a sidecar with preloads waits for its warm
// interpreters before it registers its node anyway.
const prewarmWait = time.Minute

// prewarm waits for the node's warm interpreters before the node joins: a
// job that grows to take it in pauses for its warm start, not for a cold
// one, and trains on meanwhile.
func prewarm(ctx context.Context, l *launcher.Launcher, nproc int, logger hclog.Logger) {
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, prewarmWait)
	defer cancel()
	ready, err := l.Prewarm(wctx, nproc)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		logger.Warn("joining before every warm interpreter is ready", "ready", ready, "slots", nproc, "error", err)
	default:
		logger.Info("warm interpreters ready", "ready", ready, "slots", nproc, "after", time.Since(start).Round(time.Millisecond))
	}
}

// trailingNumber is the number that ends a node id after a '-', as in a
// StatefulSet pod's name (worker-3), or nil.
func trailingNumber(id string) *int {
	i := strings.LastIndexByte(id, '-')
	if i < 0 || i == len(id)-1 || len(id)-i-1 > 9 {
		return nil
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil || n < 0 || strconv.Itoa(n) != id[i+1:] {
		return nil
	}
	return &n
}

// firstAddress is this host's first non-loopback IP address, or 127.0.0.1.
func firstAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "127.0.0.1"
	}
	for _, a := range addrs {
		if ipnet, ok := a.(*net.IPNet); ok && !ipnet.IP.IsLoopback() && ipnet.IP.To4() != nil {
			return ipnet.IP.String()
		}
	}
	return "127.0.0.1"
}

// notesFor is where the agent's notes on its ranks go: the terminal, but
// only for the ranks whose output reaches it there (--tee).
func notesFor(logs *launcher.Logs, stderr io.Writer) io.Writer {
	switch {
	case logs == nil || logs.Tee == launcher.TeeAll || logs.Tee == "":
		return stderr
	case logs.Tee == launcher.TeeRank0:
		return rankZeroLines{stderr}
	}
	return nil
}

// rankZeroLines passes on the notes about rank 0 only, as --tee rank0
// shows rank 0's output only.
type rankZeroLines struct{ w io.Writer }

func (r rankZeroLines) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("[rank 0]")) || bytes.HasPrefix(p, []byte("[ranks 0-")) {
		return r.w.Write(p)
	}
	return len(p), nil
}
