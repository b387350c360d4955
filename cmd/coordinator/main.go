package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/elastictraining/coordinator/english"

	// The process guard and `commit` run from here, before the rest of
	// the binary initialises.
	_ "github.com/elastictraining/coordinator/cmd/coordinator/internal/fastpath"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv))
}

// lookupEnv reads the environment; commands read it only through this, so
// that tests can give their own.
type lookupEnv func(string) (string, bool)

// execute runs the command line and returns the process's exit code: 0 on
// success, 2 for a usage error, the training job's exit code when the job
// failed, 1 for anything else. Every error is printed as one line.
func execute(args []string, stdin io.Reader, stdout, stderr io.Writer, env lookupEnv) int {
	root := newRootCommand(env)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var exit exitError
	if errors.As(err, &exit) {
		if exit.msg != "" {
			fmt.Fprintf(stderr, "%s: %s\n", cmd.CommandPath(), english.OneLine(exit.msg))
		}
		return exit.code
	}
	var usage usageError
	if errors.As(err, &usage) || isCobraUsageError(err) {
		fmt.Fprintf(stderr, "%s: %s (see '%s --help')\n", cmd.CommandPath(), english.OneLine(err.Error()), cmd.CommandPath())
		return 2
	}
	fmt.Fprintf(stderr, "%s: %s\n", cmd.CommandPath(), english.OneLine(err.Error()))
	return 1
}

// usageError is a command line that cannot work: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitError ends the process with a given code, as when a job failed.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return fmt.Sprintf("exit %d: %s", e.code, e.msg) }

// isCobraUsageError recognises the errors cobra itself returns for a bad
// command line.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument",
		"invalid argument", "accepts ", "requires at least", "requires at most", "required flag"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// paddleSpelling lets a flag be spelled as PaddlePaddle's launcher spells
// it: --job_id for --job, --elastic_server for --etcd-endpoints, and '_'
// for '-' in any name (--nproc_per_node, --log_dir).
func paddleSpelling(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	switch name {
	case "job_id":
		name = "job"
	case "elastic_server":
		name = "etcd-endpoints"
	}
	return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
}

func newRootCommand(env lookupEnv) *cobra.Command {
	root := &cobra.Command{
		Use:   "coordinator",
		Short: "Keep distributed training jobs alive through node failures, and resize them while they run",
		Long: `coordinator makes PaddlePaddle, PyTorch and MindSpore training jobs elastic and
fault tolerant through etcd.

A sidecar on every training node registers the node under a lease and runs the
training command. A leader-elected coordinator holds the nodes until the job's
target np is met, then commits a generation (a rank table with endpoints), and
every sidecar restarts its training processes with the new environment. The
training code resumes from its own checkpoint.`,
		Example: `  # Everything on this machine: an embedded etcd, a coordinator and 2 nodes.
  # It prints the etcd endpoint it serves on (a free port), ENDPOINT below.
  coordinator run --np 2 -- python train.py

  # From another terminal: resize the job, then watch it.
  coordinator scale --etcd-endpoints ENDPOINT --job default --np 3
  coordinator status --etcd-endpoints ENDPOINT --job default --watch
  coordinator jobs --etcd-endpoints ENDPOINT`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// --version, as `coordinator version` says it.
	root.Version = versionLine()
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.PersistentPreRunE = checkGivenFlags
	root.SetGlobalNormalizationFunc(paddleSpelling)
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(subcommands(env)...)
	return root
}
