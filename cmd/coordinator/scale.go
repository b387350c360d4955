//go:build !sidecaronly

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/internal/printers"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

func newScaleCommand(env lookupEnv) *cobra.Command {
	var (
		etcd    etcdFlags
		job     jobOption
		np      string
		wait    bool
		create  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "scale --etcd-endpoints URLS --job ID --np N|MIN:MAX [--wait]",
		Short: "Change a running job's target number of nodes",
		Long: `scale sets the job's target np. The coordinator restarts the job at the new size
once enough nodes are there: on Kubernetes the bridge adds or removes pods, and
under 'coordinator run' the local nodes follow. A job that does not exist is
refused (a mistyped id would start a job that waits for ever) unless --create
is given, which creates it with default settings.

With --wait, scale prints the job's progress and returns once the job runs at
the new size; it exits 1 if the job ends or the timeout passes first.

PaddlePaddle's spelling works too: --elastic_server for --etcd-endpoints and
--job_id for --job, as in python -m paddle.distributed.elastic ... scale.`,
		Example: `  coordinator scale --etcd-endpoints http://127.0.0.1:2379 --job default --np 4
  coordinator scale --job resnet --np 2:8 --wait
  coordinator scale --elastic_server=127.0.0.1:2379 --job_id=XXXXXX --np=4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := job.id()
			if err != nil {
				return err
			}
			if np == "" {
				return usagef("--np is required")
			}
			target, err := parseNP(np, origin{flag: "np"})
			if err != nil {
				return err
			}
			if timeout <= 0 {
				return usagef("--timeout %s: want a positive duration", timeout)
			}
			ctx, out, name := cmd.Context(), cmd.OutOrStdout(), job.displayName(id)
			return etcd.withJobs(ctx, func(client *jobclient.Client, keys membership.Keys) error {
				before, _ := client.Status(ctx, id)
				if before.Phase.Done() {
					// Its sidecars have exited: a new np would change
					// nothing but the record of how it ended.
					return fmt.Errorf("job %s has ended (%s: %s); delete it (coordinator delete --job %s) to run it again", name, before.Phase, printers.OrDash(before.Message), name)
				}
				written, err := client.Resize(ctx, jobclient.ScaleRequest{Job: id, NP: target, Create: create, Name: job.specName(id)})
				if err != nil {
					return notFound(err, name, id, keys, "or add --create to start it")
				}
				if written.Repaired != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "job %s: the stored spec was malformed (%s); replaced it with the last good spec and np %s\n",
						name, english.OneLine(written.Repaired.Error()), written.Spec.NP)
				}
				var was membership.NP
				if written.Before != nil {
					was = written.Before.NP
				}
				fmt.Fprintf(out, "job %s: np %s\n", name, describeChange(was, written.Spec.NP))
				if !wait {
					return nil
				}
				return waitForSize(ctx, out, client, id, name, target, timeout)
			})
		},
	}
	fs := cmd.Flags()
	etcd.register(fs, env)
	job.register(fs, env, "", jobVariables...)
	fs.StringVar(&np, "np", "", "new target: N, or MIN:MAX for any size in the range")
	checkGiven(fs, "np", func() error { _, err := parseNP(np, origin{flag: "np"}); return err })
	fs.BoolVar(&create, "create", false, "create the job if it does not exist")
	fs.BoolVar(&wait, "wait", false, "show the job's progress and return once it runs at the new size")
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait, how long to wait")
	return cmd
}

// describeChange is "2 → 3"; a range given up for an exact np says so,
// since the job no longer moves within it.
func describeChange(before, after membership.NP) string {
	switch {
	case before == membership.NP{}:
		return after.String()
	case before == after:
		return after.String() + " (unchanged)"
	case before.Min != before.Max && after.Min == after.Max:
		return fmt.Sprintf("%s → %s (the range %s is replaced: the job now runs at exactly %d)", before, after, before, after.Min)
	}
	return before.String() + " → " + after.String()
}

// waitForSize prints the job's status at every change until the
// coordinator has taken the new np into account and runs the job at a size
// it allows, then says so; the job's end or the timeout is an error that
// says where the job stands.
func waitForSize(ctx context.Context, out io.Writer, client *jobclient.Client, id, name string, np membership.NP, timeout time.Duration) error {
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	began := time.Now()
	var last membership.Status
	seen := false
	err := client.WatchStatus(waitCtx, id, func(s membership.Status) (bool, error) {
		if s.Phase.Done() {
			return true, fmt.Errorf("job %s %s before it ran at np %s: %s", name, strings.ToLower(string(s.Phase)), np, s.Message)
		}
		// np counts workers; a status of an older coordinator has no
		// Workers, and then its members are the best there is.
		workers := s.Workers
		if workers == 0 {
			workers = s.Members
		}
		if s.Phase == membership.JobRunning && s.NP == np && workers >= np.Min && workers <= np.Max {
			fmt.Fprintf(out, "job %s runs at np %s: generation %d, %s, world size %d (%s)\n",
				name, np, s.Generation, english.Count(workers, "worker node"), s.WorldSize, time.Since(began).Round(time.Millisecond))
			return true, nil
		}
		if !seen || s.Phase != last.Phase || s.Generation != last.Generation || s.Message != last.Message {
			line := fmt.Sprintf("  %-10s generation %d", s.Phase, s.Generation)
			if s.Message != "" {
				line += ": " + s.Message
			}
			fmt.Fprintln(out, line)
		}
		last, seen = s, true
		return false, nil
	})
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		where := "no status yet"
		if seen {
			where = fmt.Sprintf("it is %s at generation %d: %s", last.Phase, last.Generation, printers.OrDash(last.Message))
		}
		return exitError{code: 1, msg: fmt.Sprintf("job %s did not run at np %s within %s; %s", name, np, timeout, where)}
	}
	return err
}
