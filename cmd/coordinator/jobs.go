//go:build !sidecaronly

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/internal/printers"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

func newJobsCommand(env lookupEnv) *cobra.Command {
	var (
		etcd   etcdFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "jobs --etcd-endpoints URLS [-o table|json]",
		Short: "List the jobs in etcd with their phase, generation, np, ready nodes and age",
		Long: `jobs lists every job under the key prefix: its name, phase, generation, target
np, nodes ready of its members, registered nodes, restarts and age (since its
spec was first stored).`,
		Example: `  coordinator jobs --etcd-endpoints http://127.0.0.1:2379
  coordinator jobs -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			ctx := cmd.Context()
			var jobs []jobclient.JobSummary
			err := etcd.withJobs(ctx, func(client *jobclient.Client, _ membership.Keys) error {
				var err error
				jobs, err = client.Jobs(ctx)
				return err
			})
			if err != nil {
				return err
			}
			if output == "json" {
				return printers.WriteJobsJSON(cmd.OutOrStdout(), jobs)
			}
			printers.WriteJobsTable(cmd.OutOrStdout(), jobs, time.Now())
			return nil
		},
	}
	etcd.register(cmd.Flags(), env)
	registerOutput(cmd.Flags(), &output)
	return cmd
}

func newDeleteCommand(env lookupEnv) *cobra.Command {
	var (
		etcd    etcdFlags
		job     jobOption
		force   bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "delete --etcd-endpoints URLS --job ID [--force]",
		Short: "Delete a job that has ended, and all its keys",
		Long: `delete removes every key of a job that has ended (Succeeded or Failed): its spec,
status, plan, rank tables, events and node records.

A job that has not ended is refused unless --force is given: then the
coordinator is asked to end it first (failed, "cancelled"). Either way the
keys go only once every node has stopped its training processes and left
(an evicted node: once it is certainly fenced), so that a job created again
under the same name never runs beside the old one's processes; delete waits
for that up to --timeout. A job that a Kubernetes resource runs is deleted
by deleting that resource.

serve deletes finished jobs by itself after --finished-job-retention.`,
		Example: `  coordinator delete --etcd-endpoints http://127.0.0.1:2379 --job resnet
  coordinator delete --job resnet --force`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := job.id()
			if err != nil {
				return err
			}
			if timeout <= 0 {
				return usagef("--timeout %s: want a positive duration", timeout)
			}
			name := job.displayName(id)
			return etcd.withJobs(cmd.Context(), func(client *jobclient.Client, keys membership.Keys) error {
				// Everything from here, the reads included, within
				// --timeout: an etcd that goes away (run's, when run
				// ends) is an error, not a wait for ever.
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
				defer cancel()
				st, err := deleteJob(ctx, cmd.OutOrStdout(), client, id, name, force)
				var stopping *jobclient.StoppingError
				switch {
				case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &stopping):
					return fmt.Errorf("job %s: not deleted within --timeout %s: %s", name, timeout, deleteWaitingFor(st, err))
				case errors.Is(err, jobclient.ErrJobRunning):
					return fmt.Errorf("job %s is %s (generation %d, %d of %s ready): it has not ended; wait for it, or add --force to end it first",
						name, st.Phase, st.Generation, st.Ready, english.Count(st.Members, "member"))
				case errors.Is(err, jobclient.ErrJobNotFound):
					return notFound(err, name, id, keys, listJobsHint)
				case err != nil:
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "job %s (%s) deleted\n", name, st.Phase)
				return nil
			})
		},
	}
	fs := cmd.Flags()
	etcd.register(fs, env)
	job.register(fs, env, "", jobVariables...)
	fs.BoolVar(&force, "force", false, "end a job that has not ended first, then delete it")
	fs.DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the job to end (with --force) and for its nodes to stop their processes")
	return cmd
}

// deleteJob deletes a job once it has ended and every node has stopped its
// processes: the keys go only then, so that a job created again under the
// same name never starts beside the old one's processes. With force, a
// job that has not ended is asked to end first.
func deleteJob(ctx context.Context, out io.Writer, client *jobclient.Client, id, name string, force bool) (membership.Status, error) {
	cancelled, waiting := false, int64(-1)
	for {
		st, err := client.Delete(ctx, id)
		var stopping *jobclient.StoppingError
		switch {
		case errors.Is(err, jobclient.ErrJobRunning) && force && !cancelled:
			fmt.Fprintf(out, "job %s is %s: asking the coordinator to end it\n", name, st.Phase)
			w, err := client.RequestCancel(ctx, id, "deleted with coordinator delete --force")
			if err != nil {
				return st, err
			}
			if w.Repaired != nil {
				fmt.Fprintf(out, "job %s: the stored spec was malformed (%s); replaced it with one that asks for the end\n", name, english.OneLine(w.Repaired.Error()))
			}
			if st, err = client.WaitEnded(ctx, id); err != nil {
				return st, err
			}
			cancelled = true
			continue
		case errors.As(err, &stopping):
			if left := stopping.Nodes + stopping.Evicted; left != waiting {
				fmt.Fprintf(out, "job %s is %s: waiting for its nodes to stop: %s\n", name, st.Phase, stopping)
				waiting = left
			}
			select {
			case <-ctx.Done():
				return st, stopping // out of time with nodes left
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		return st, err
	}
}

// deleteWaitingFor says what a delete that ran out of time waited for.
func deleteWaitingFor(st membership.Status, err error) string {
	var stopping *jobclient.StoppingError
	switch {
	case errors.As(err, &stopping):
		return stopping.Error() + "; nothing was deleted"
	case st.Phase != "" && !st.Phase.Done():
		return fmt.Sprintf("it is still %s: is a coordinator (serve) running? Nothing was deleted", st.Phase)
	}
	return "etcd did not answer; nothing was deleted"
}
