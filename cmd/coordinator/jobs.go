//go:build !sidecaronly

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/english"
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
			if output != "table" && output != "json" {
				return usagef("-o %q: want table or json", output)
			}
			ctx := cmd.Context()
			cli, keys, err := etcd.client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			jobs, err := jobclient.New(cli, keys).Jobs(ctx)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJobsJSON(cmd.OutOrStdout(), jobs)
			}
			writeJobsTable(cmd.OutOrStdout(), jobs, time.Now())
			return nil
		},
	}
	etcd.register(cmd.Flags(), env)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

// jobView is one job of `jobs -o json`.
type jobView struct {
	Job        string              `json:"job"`
	Name       string              `json:"name,omitempty"`
	Phase      membership.JobPhase `json:"phase"`
	Generation int64               `json:"generation"`
	NP         *npView             `json:"np"`
	Members    int                 `json:"members"`
	Ready      int                 `json:"ready"`
	Nodes      int64               `json:"nodes"`
	Restarts   int                 `json:"restarts"`
	Created    *time.Time          `json:"created"`
	Message    string              `json:"message"`
}

func newJobView(j jobclient.JobSummary) jobView {
	v := jobView{Job: j.ID, Phase: j.Status.Phase, Generation: j.Status.Generation, Members: j.Status.Members, Ready: j.Status.Ready,
		Nodes: j.Nodes, Restarts: j.Status.Restarts, Message: j.Status.Message}
	if np := j.Status.NP; !np.IsZero() {
		v.NP = &npView{Min: np.Min, Max: np.Max}
	}
	if j.Spec != nil {
		v.Name = j.Spec.Name
		if !j.Spec.CreatedAt.IsZero() {
			created := j.Spec.CreatedAt
			v.Created = &created
		}
	}
	return v
}

func writeJobsJSON(w io.Writer, jobs []jobclient.JobSummary) error {
	out := make([]jobView, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, newJobView(j))
	}
	return writeJSON(w, out)
}

func writeJobsTable(w io.Writer, jobs []jobclient.JobSummary, now time.Time) {
	if len(jobs) == 0 {
		fmt.Fprintln(w, "No jobs.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tPHASE\tGENERATION\tNP\tREADY\tNODES\tRESTARTS\tAGE")
	for _, j := range jobs {
		v := newJobView(j)
		name := v.Job
		if v.Name != "" {
			name = fmt.Sprintf("%s (%s)", v.Name, v.Job)
		}
		np := "-"
		if v.NP != nil {
			np = membership.NP{Min: v.NP.Min, Max: v.NP.Max}.String()
		}
		ready := "-"
		if v.Phase == membership.JobRunning || v.Phase == membership.JobRestarting {
			ready = fmt.Sprintf("%d/%d", v.Ready, v.Members)
		}
		age := "-"
		if v.Created != nil {
			age = shortDuration(now.Sub(*v.Created))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", name, v.Phase, v.Generation, np, ready, v.Nodes, v.Restarts, age)
	}
	tw.Flush()
}

// shortDuration renders an age as kubectl does: 45s, 12m, 3h, 5d.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
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
			cli, keys, err := etcd.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cli.Close()
			client := jobclient.New(cli, keys)
			name := job.displayName(id)
			// Everything from here, the reads included, within --timeout:
			// an etcd that goes away (run's, when run ends) is an error,
			// not a wait for ever.
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
				return fmt.Errorf("job %s does not exist (nothing under %s)", name, keys.Job(id))
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %s (%s) deleted\n", name, st.Phase)
			return nil
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
			if st, err = client.Cancel(ctx, id, "deleted with coordinator delete --force"); err != nil {
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
