//go:build !sidecaronly

package main

import (
	"context"

	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// jobClient connects to etcd as the flags say, for the commands that read
// and change jobs; close ends the connection.
func (f *etcdFlags) jobClient(ctx context.Context) (client *jobclient.Client, keys membership.Keys, close func(), err error) {
	cli, keys, err := f.client(ctx)
	if err != nil {
		return nil, keys, nil, err
	}
	return jobclient.New(cli, keys), keys, func() { cli.Close() }, nil
}

// checkOutput refuses an -o that is neither table nor json.
func checkOutput(output string) error {
	if output != "table" && output != "json" {
		return usagef("-o %q: want table or json", output)
	}
	return nil
}
