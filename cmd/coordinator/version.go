package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, etcdVersion := version, "unknown"
			if info, ok := debug.ReadBuildInfo(); ok {
				if v == "" {
					v = info.Main.Version
				}
				for _, d := range info.Deps {
					if d.Path == "go.etcd.io/etcd/client/v3" {
						etcdVersion = d.Version
					}
				}
			}
			if v == "" || v == "(devel)" {
				v = "dev"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "coordinator %s (%s, etcd client %s)\n", v, runtime.Version(), etcdVersion)
			return nil
		},
	}
}
