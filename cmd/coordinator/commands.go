//go:build !sidecaronly

package main

import (
	"github.com/spf13/cobra"

	// Mozilla's CA roots, used where the system has none: the image is
	// the binary alone, and the job controller reads images' commands
	// from registries over HTTPS.
	_ "golang.org/x/crypto/x509roots/fallback"
)

// subcommands are every command of the full binary.
func subcommands(env lookupEnv) []*cobra.Command {
	return []*cobra.Command{
		newRunCommand(env),
		newEtcdCommand(env),
		newCertsCommand(env),
		newServeCommand(env),
		newSidecarCommand(env),
		newScaleCommand(env),
		newStatusCommand(env),
		newJobsCommand(env),
		newDeleteCommand(env),
		newEventsCommand(env),
		newInstallCommand(),
		newPythonModuleCommand(),
		newCommitCommand(env),
		newBeatCommand(env),
		newGuardCommand(),
		newFenceWatchCommand(),
		newVersionCommand(),
	}
}
