//go:build !sidecaronly

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/internal/printers"
	"github.com/elastictraining/coordinator/internal/timeline"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

func newEventsCommand(env lookupEnv) *cobra.Command {
	var (
		etcd   etcdFlags
		job    jobOption
		output string
		plot   string
	)
	cmd := &cobra.Command{
		Use:   "events --etcd-endpoints URLS --job ID [-o table|json] [--plot FILE.png|FILE.svg]",
		Short: "Show a job's history: its generations, why each began and how long each restart took",
		Long: `events prints the job's events, oldest first: each generation stopping,
starting and running, with the reason and, once every member runs, how long
each step of the restart took (detect, stop, wait, start, total); nodes
evicted; the job's end. serve keeps them for --event-retention (24 hours).

With --plot it also draws the timeline to a PNG or SVG file: the world size of
each generation over time, each restart's duration, step by step, and what
the job did (training, starting, restarting, waiting, hung, redone,
suspended, as its goodput account counts it), up to now for a job that
runs.`,
		Example: `  coordinator events --etcd-endpoints http://127.0.0.1:2379 --job default
  coordinator events --job resnet --plot resnet.png`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := jobAndOutput(&job, output)
			if err != nil {
				return err
			}
			format := ""
			if plot != "" {
				if format, err = timeline.FormatOf(plot); err != nil {
					return usagef("--plot %v", err)
				}
			}
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			var (
				events []membership.Event
				status membership.Status
			)
			err = etcd.withJobs(ctx, func(client *jobclient.Client, keys membership.Keys) error {
				if status, err = client.Status(ctx, id); err != nil {
					return notFound(err, job.displayName(id), id, keys, listJobsHint)
				}
				events, err = client.Events(ctx, id)
				return err
			})
			if err != nil {
				return err
			}
			if output == "json" {
				err = printers.WriteEventsJSON(out, events)
			} else {
				printers.WriteEventsTable(out, job.displayName(id), events)
			}
			if err != nil || plot == "" {
				return err
			}
			return writePlot(plot, format, timeline.Job{Title: "job " + job.displayName(id), Events: events,
				Account: status.Goodput, Now: time.Now()}, out)
		},
	}
	fs := cmd.Flags()
	etcd.register(fs, env)
	job.register(fs, env, "", jobVariables...)
	registerOutput(fs, &output)
	fs.StringVar(&plot, "plot", "", "also draw the timeline to this file, .png or .svg")
	checkGiven(fs, "plot", func() error {
		if _, err := timeline.FormatOf(plot); plot != "" && err != nil {
			return usagef("--plot %v", err)
		}
		return nil
	})
	return cmd
}

// writePlot draws the timeline to file, replacing it only once drawn.
func writePlot(file, format string, j timeline.Job, out io.Writer) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), ".plot-*"+format)
	if err != nil {
		return fmt.Errorf("--plot %s: %w", file, err)
	}
	defer os.Remove(tmp.Name())
	if err := timeline.Plot(tmp, format, j); err != nil {
		tmp.Close()
		return fmt.Errorf("plot: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--plot %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("--plot %s: %w", file, err)
	}
	fmt.Fprintf(out, "timeline drawn to %s\n", file)
	return nil
}
