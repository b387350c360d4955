//go:build !sidecaronly

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/elastictraining/coordinator/internal/etcdprobe"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// withJobs connects to etcd as the flags say, for a command that reads or
// changes jobs, runs it with the client of the jobs, and disconnects.
func (f *etcdFlags) withJobs(ctx context.Context, run func(client *jobclient.Client, keys membership.Keys) error) error {
	cli, keys, err := f.client(ctx, etcdprobe.FailAtOnce)
	if err != nil {
		return err
	}
	defer cli.Close()
	return run(jobclient.New(cli, keys), keys)
}

// notFound says what a person can do about a job id that names nothing,
// where err says so; other errors are returned as they are. hint is the
// way out the command offers.
func notFound(err error, name, id string, keys membership.Keys, hint string) error {
	if !errors.Is(err, jobclient.ErrJobNotFound) {
		return err
	}
	return fmt.Errorf("job %s does not exist (no spec, node or status under %s); check --job, %s", name, keys.Job(id), hint)
}

// listJobsHint points at the jobs that do exist.
const listJobsHint = "or list the jobs with `coordinator jobs`"

// registerOutput registers -o, table or json.
func registerOutput(fs *pflag.FlagSet, output *string) {
	fs.StringVarP(output, "output", "o", "table", "table or json")
	checkGiven(fs, "output", func() error { return checkOutput(*output) })
}

// checkOutput refuses an -o that is neither table nor json.
func checkOutput(output string) error {
	if output != "table" && output != "json" {
		return usagef("-o %q: want table or json", output)
	}
	return nil
}

// jobAndOutput is the job's id, for a command that shows one job as -o
// asks, once both flags are checked.
func jobAndOutput(job *jobOption, output string) (string, error) {
	id, err := job.id()
	if err != nil {
		return "", err
	}
	return id, checkOutput(output)
}
