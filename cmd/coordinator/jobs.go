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

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/internal/english"
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
			jobs, err := coordinator.NewClient(cli, keys).Jobs(ctx)
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

func newJobView(j coordinator.JobSummary) jobView {
	v := jobView{Job: j.ID, Phase: j.Status.Phase, Generation: j.Status.Generation, Members: j.Status.Members, Ready: j.Status.Ready,
		Nodes: j.Nodes, Restarts: j.Status.Restarts, Message: j.Status.Message}
	if np, err := membership.ParseNP(j.Status.NP); err == nil {
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

func writeJobsJSON(w io.Writer, jobs []coordinator.JobSummary) error {
	out := make([]jobView, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, newJobView(j))
	}
	return writeJSON(w, out)
}

func writeJobsTable(w io.Writer, jobs []coordinator.JobSummary, now time.Time) {
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
coordinator is asked to end it first (failed, "cancelled"), its sidecars stop
their training processes and exit, and its keys go once it has ended. A job
that a Kubernetes resource runs is deleted by deleting that resource.

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
			ctx := cmd.Context()
			cli, keys, err := etcd.client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			client := coordinator.NewClient(cli, keys)
			name := job.displayName(id)
			st, err := client.Delete(ctx, id)
			if errors.Is(err, coordinator.ErrJobRunning) && force {
				fmt.Fprintf(cmd.OutOrStdout(), "job %s is %s: asking the coordinator to end it\n", name, st.Phase)
				waitCtx, cancel := context.WithTimeout(ctx, timeout)
				_, err = client.Cancel(waitCtx, id, "deleted with coordinator delete --force")
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("job %s did not end within %s: is a coordinator (serve) running? Nothing was deleted; it ends, and can be deleted, once one runs", name, timeout)
				}
				if err != nil {
					return err
				}
				st, err = client.Delete(ctx, id)
			}
			switch {
			case errors.Is(err, coordinator.ErrJobRunning):
				return fmt.Errorf("job %s is %s (generation %d, %d of %s ready): it has not ended; wait for it, or add --force to end it first",
					name, st.Phase, st.Generation, st.Ready, english.Count(st.Members, "member"))
			case errors.Is(err, coordinator.ErrJobNotFound):
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
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "with --force, how long to wait for the coordinator to end the job")
	return cmd
}
