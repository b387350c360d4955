package main

import (
	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/guard"
)

// newCommitCommand documents `commit`; it, `guard` and `fence-watch`
// normally run from the fastpath package before cobra is reached.
func newCommitCommand(env lookupEnv) *cobra.Command {
	return withGuardFlags(&cobra.Command{
		Use:   "commit SRC DST | commit --check",
		Short: "Commit a checkpoint (rename SRC to DST) only while this training process's generation is current",
		Long: `commit is for training code run by a sidecar. It renames the checkpoint SRC to DST
only while the process's generation is current and its node holds its lease; a
process of a node that was fenced out (frozen, cut off, evicted) is refused and
exits 1, so that it can never write an older checkpoint over a newer one. With
--check it only asks. It asks the process's fence watchdog (ELASTIC_WATCHDOG_SOCKET),
which answers even while the sidecar and its guard are frozen, and the guard
(ELASTIC_FENCE_SOCKET) when the watchdog cannot be reached. Outside a sidecar (no
ELASTIC_FENCE_SOCKET) it renames.`,
		Example: `  # in a shell trainer, after writing "$ckpt.tmp":
  "$ELASTIC_COORDINATOR" commit "$ckpt.tmp" "$ckpt" || exit 1`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			getenv := func(k string) string { v, _ := env(k); return v }
			if code := guard.CommitMain(args, getenv, cmd.ErrOrStderr()); code != 0 {
				return exitError{code: code}
			}
			return nil
		},
	})
}

func newGuardCommand() *cobra.Command {
	return withGuardFlags(&cobra.Command{
		Use:                "guard",
		Short:              "The process guard of a sidecar's training processes (started by the sidecar)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := guard.Main(args, cmd.OutOrStdout(), cmd.ErrOrStderr()); code != 0 {
				return exitError{code: code}
			}
			return nil
		},
	})
}

// newFenceWatchCommand documents `fence-watch`, which the guard starts
// beside each training process.
func newFenceWatchCommand() *cobra.Command {
	return withGuardFlags(&cobra.Command{
		Use:                "fence-watch",
		Short:              "The fence watchdog of one training process (started by the process guard)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := guard.WatchMain(args, cmd.ErrOrStderr()); code != 0 {
				return exitError{code: code}
			}
			return nil
		},
	})
}

// newBeatCommand documents `beat`, which normally runs from the fastpath
// package before cobra is reached.
func newBeatCommand(env lookupEnv) *cobra.Command {
	return withGuardFlags(&cobra.Command{
		Use:   "beat [--step N]",
		Short: "Tell the sidecar that this training process made progress (for a shell trainer's hang watch)",
		Long: `beat is for training code run by a sidecar that neither steps a PyTorch optimizer
nor calls elastic.beat() (a shell script, a program in another language): each
call is one step of progress for the hang watch (see --hang-timeout), and --step
names the step in messages. It writes to the progress page the sidecar's guard
gave the process (ELASTIC_PROGRESS_FD), with no round trip. Outside a sidecar it
does nothing.`,
		Example: `  # in a shell trainer's loop:
  "$ELASTIC_COORDINATOR" beat --step "$step"`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			getenv := func(k string) string { v, _ := env(k); return v }
			if code := guard.BeatMain(args, getenv, cmd.ErrOrStderr()); code != 0 {
				return exitError{code: code}
			}
			return nil
		},
	})
}

// withGuardFlags has the help of cmd, a command of the guard that parses
// its own flags, show them.
func withGuardFlags(cmd *cobra.Command) *cobra.Command {
	cmd.Flags().AddGoFlagSet(guard.Flags(cmd.Name()))
	return cmd
}
