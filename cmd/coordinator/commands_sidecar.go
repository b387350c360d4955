//go:build sidecaronly

package main

import "github.com/spf13/cobra"

// subcommands are the commands of the sidecar's own binary
// (`make build` builds it as bin/coordinator-sidecar): what a training pod
// runs, without the etcd server, the coordinator and the Kubernetes
// clients, which every training pod would otherwise load.
func subcommands(env lookupEnv) []*cobra.Command {
	return []*cobra.Command{
		newSidecarCommand(env),
		newCommitCommand(env),
		newBeatCommand(env),
		newGuardCommand(),
		newFenceWatchCommand(),
		newVersionCommand(),
	}
}
