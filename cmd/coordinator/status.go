//go:build !sidecaronly

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/internal/printers"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

func newStatusCommand(env lookupEnv) *cobra.Command {
	var (
		etcd   etcdFlags
		job    jobOption
		watch  bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "status --etcd-endpoints URLS --job ID [--watch] [-o table|json]",
		Short: "Show a job's phase, generation and nodes",
		Long: `status shows the job as the coordinator last reported it: its phase (Waiting,
Restarting, Running, Succeeded, Failed), generation, target np, size, restarts
and the durations of the last restart; then every node with its rank.

With --watch it prints a line every time the status changes, until the job
ends, and exits with the job's result: 0 when it succeeded, its exit code (at
least 1) when it failed. With -o json every line is one JSON object, with
durations in seconds, np as {"min":N,"max":M} and the nodes.`,
		Example: `  coordinator status --etcd-endpoints http://127.0.0.1:2379 --job default
  coordinator status --job resnet --watch -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := jobAndOutput(&job, output)
			if err != nil {
				return err
			}
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			return etcd.withJobs(ctx, func(client *jobclient.Client, keys membership.Keys) error {
				view, err := printers.LoadStatus(ctx, client, id)
				if err != nil {
					return notFound(err, job.displayName(id), id, keys, listJobsHint)
				}
				if watch {
					return watchJob(ctx, out, client, id, output)
				}
				if output == "json" {
					return printers.WriteJSON(out, view)
				}
				printers.WriteStatusTable(out, view)
				return nil
			})
		},
	}
	fs := cmd.Flags()
	etcd.register(fs, env)
	job.register(fs, env, "", jobVariables...)
	fs.BoolVarP(&watch, "watch", "w", false, "print every change of the status until the job ends; exit with the job's result")
	registerOutput(fs, &output)
	return cmd
}

// watchJob prints the status at every change until the job ends, and
// returns the job's result: nil when it succeeded, an exitError with its
// exit code when it failed.
func watchJob(ctx context.Context, out io.Writer, client *jobclient.Client, job, output string) error {
	name := job
	if spec, err := client.Spec(ctx, job); err == nil && spec.Name != "" {
		name = spec.Name
	}
	first := max(len("JOB"), len(name))
	if output == "table" {
		fmt.Fprintln(out, printers.PaddedRow(printers.StatusHeader(), first))
	}
	var final membership.Status
	err := client.WatchStatus(ctx, job, func(s membership.Status) (bool, error) {
		v := printers.NewStatus(job, s)
		if name != job {
			v.Name = name
		}
		done := s.Phase.Done()
		if done {
			final = s
		}
		if output == "json" {
			nodes, err := printers.LoadNodes(ctx, client, job)
			if err != nil {
				return false, err
			}
			v.Nodes = nodes
			return done, printers.WriteJSON(out, v)
		}
		_, err := fmt.Fprintln(out, printers.PaddedRow(printers.StatusCells(v), first))
		return done, err
	})
	switch {
	case err != nil:
		return err
	case final.Phase == membership.JobFailed:
		return exitError{code: max(final.ExitCode, 1)}
	}
	return nil
}
