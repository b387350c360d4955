//go:build !sidecaronly

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/internal/localrun"
	"github.com/elastictraining/coordinator/launcher"
	"github.com/elastictraining/coordinator/membership"
)

func newRunCommand(env lookupEnv) *cobra.Command {
	var (
		job, np, listen, dataDir, logLevel, successPolicy string
		nproc, faultTolerance, maxRestarts                int
		ttl, grace                                        time.Duration
		withGloo                                          int
	)
	cmd := &cobra.Command{
		Use:   "run --np N|MIN:MAX [--nproc-per-node K] [--listen-client-urls URL] -- CMD [ARGS...]",
		Short: "Run an elastic job on this machine: embedded etcd, a coordinator and the nodes",
		Long: `run is the whole system on one machine, like torchrun --standalone: an embedded
etcd, a coordinator, and one sidecar per node that np asks for, each with its
own ports and K training processes.

It prints the etcd endpoint it serves on, so that 'coordinator scale' and
'coordinator status' work from another terminal; scale starts or stops local
nodes. A node whose sidecar dies is started again. One line is printed per
generation: its size, why it exists and how long the restart took. run exits
0 when the job succeeds and with the failed training process's exit code
when it fails.`,
		Example: `  coordinator run --np 2 -- testdata/toytrainer.sh
  coordinator run --np 2:4 --nproc-per-node 2 --listen-client-urls http://127.0.0.1:2379 -- python train.py`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 || len(args) == 0 {
				return usagef("no training command: put it after --, as in: coordinator run --np 2 -- python train.py")
			}
			if np == "" {
				return usagef("--np is required")
			}
			target, err := npFlag(np)
			if err != nil {
				return err
			}
			if err := jobFlag(job); err != nil {
				return err
			}
			if nproc < 1 || nproc > membership.MaxNProc {
				return usagef("--nproc-per-node %d: want 1..%d", nproc, membership.MaxNProc)
			}
			if ttl < membership.MinTTL {
				return usagef("--ttl %s: at least %s", ttl, membership.MinTTL)
			}
			if withGloo < 0 || withGloo > 2 {
				return usagef("--with-gloo %d: want 0, 1 or 2", withGloo)
			}
			spec := membership.DefaultSpec(target)
			spec.FaultTolerance, spec.MaxRestarts = faultTolerance, maxRestarts
			spec.SuccessPolicy = membership.SuccessPolicy(successPolicy)
			if err := spec.Validate(); err != nil {
				return usageError{err}
			}
			logger, err := newLogger(cmd.ErrOrStderr(), "run", logLevel)
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this program to start sidecars: %w", err)
			}
			exe = sidecarBinary(exe)
			var sidecarArgs []string
			if withGloo > 0 {
				sidecarArgs = append(sidecarArgs, fmt.Sprintf("--with-gloo=%d", withGloo))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			code, err := localrun.Run(ctx, localrun.Config{
				Executable: exe, Job: job, Spec: spec, NProc: nproc, Command: args, DataDir: dataDir, ClientURL: listen,
				TTL: ttl, Grace: grace, SidecarArgs: sidecarArgs, SidecarLogLevel: logLevel, Env: os.Environ(),
				Out: cmd.OutOrStdout(), Err: cmd.ErrOrStderr(), Logger: logger,
			})
			switch {
			case errors.Is(err, context.Canceled):
				return exitError{code: 130}
			case err != nil:
				return err
			case code != 0:
				return exitError{code: code}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&np, "np", fromEnv(env, "", "ELASTIC_NP", "PADDLE_ELASTIC_NP"), "nodes to run, N or MIN:MAX"+envNote("ELASTIC_NP", "PADDLE_ELASTIC_NP"))
	fs.StringVar(&job, "job", fromEnv(env, "default", "ELASTIC_JOB_ID"), "job id"+envNote("ELASTIC_JOB_ID"))
	fs.IntVar(&nproc, "nproc-per-node", 1, "training processes per node")
	fs.StringVar(&listen, "listen-client-urls", "", "URL the embedded etcd serves on; a free localhost port if empty")
	fs.StringVar(&dataDir, "data-dir", "", "keep etcd's data here; a temporary directory if empty")
	fs.IntVar(&faultTolerance, "fault-tolerance-level", envInt(env, membership.FaultToleranceRestart, "PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL"),
		"0: a failure ends the job; 1: restart; 2: restart and replace the failing node"+envNote("PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL"))
	fs.IntVar(&maxRestarts, "max-restarts", membership.DefaultMaxRestarts, "restarts the job may spend on failures")
	fs.StringVar(&successPolicy, "success-policy", string(membership.SuccessAllWorkers), "AllWorkers or Rank0")
	fs.DurationVar(&ttl, "ttl", membership.DefaultTTL, "sidecars' lease TTL")
	fs.DurationVar(&grace, "grace-period", launcher.DefaultGrace, "time between SIGTERM and SIGKILL when stopping training processes")
	fs.IntVar(&withGloo, "with-gloo", 0, "PaddlePaddle's withGloo, 1 or 2: set PADDLE_WITH_GLOO and PADDLE_GLOO_RENDEZVOUS=3; --with-gloo alone is 1")
	fs.Lookup("with-gloo").NoOptDefVal = "1"
	fs.StringVar(&logLevel, "log-level", "warn", "log level of the coordinator and sidecars")
	return cmd
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
