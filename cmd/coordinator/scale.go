//go:build !sidecaronly

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/membership"
)

func newScaleCommand(env lookupEnv) *cobra.Command {
	var (
		etcd    etcdFlags
		job, np string
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "scale --etcd-endpoints URLS --job ID --np N|MIN:MAX",
		Short: "Change a running job's target number of nodes",
		Long: `scale sets the job's target np. The coordinator restarts the job at the new size
once enough nodes are there: on Kubernetes the bridge adds or removes pods, and
under 'coordinator run' the local nodes follow. A job that has no spec yet gets
one with default settings.

With --wait, scale returns once the job runs at the new size.`,
		Example: `  coordinator scale --etcd-endpoints http://127.0.0.1:2379 --job default --np 4
  coordinator scale --job resnet --np 2:8 --wait`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := jobFlag(job); err != nil {
				return err
			}
			if np == "" {
				return usagef("--np is required")
			}
			target, err := npFlag(np)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cli, keys, err := etcd.client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			client := coordinator.NewClient(cli, keys)
			before, _ := client.Status(ctx, job)
			spec, err := client.Scale(ctx, job, np)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %s: np %s\n", job, describeChange(before.NP, spec.NP.String()))
			if !wait {
				return nil
			}
			waitCtx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			st, err := waitForSize(waitCtx, client, job, target)
			if err != nil {
				return fmt.Errorf("waiting for job %s to run at np %s: %w", job, np, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %s: running generation %d with %d nodes, world size %d\n", job, st.Generation, st.Members, st.WorldSize)
			return nil
		},
	}
	fs := cmd.Flags()
	etcd.register(fs, env)
	fs.StringVar(&job, "job", fromEnv(env, "", "ELASTIC_JOB_ID", "PADDLE_ELASTIC_JOB_ID"), "job id"+envNote("ELASTIC_JOB_ID", "PADDLE_ELASTIC_JOB_ID"))
	fs.StringVar(&np, "np", "", "new target: N, or MIN:MAX for any size in the range")
	fs.BoolVar(&wait, "wait", false, "return once the job runs at the new size")
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait, how long to wait")
	return cmd
}

func describeChange(before, after string) string {
	switch before {
	case "":
		return after
	case after:
		return after + " (unchanged)"
	}
	return before + " → " + after
}

// waitForSize watches the job's status until the coordinator has taken the
// new np into account and runs the job at a size it allows, or the job ends.
func waitForSize(ctx context.Context, client *coordinator.Client, job string, np membership.NP) (membership.Status, error) {
	var result membership.Status
	err := client.WatchStatus(ctx, job, func(s membership.Status) (bool, error) {
		if s.Phase.Done() {
			return true, errors.New("the job ended: " + s.Message)
		}
		ok := s.Phase == membership.JobRunning && s.NP == np.String() && s.Members >= np.Min && s.Members <= np.Max
		if ok {
			result = s
		}
		return ok, nil
	})
	return result, err
}
