//go:build !sidecaronly

package main

import (
	"context"

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
