package main

import (
	_ "embed"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// releaseVersion is the project's version, from the file VERSION (the
// repository's VERSION links to it), so that every build says it, `go run`
// included.
//
//go:embed VERSION
var releaseVersion string

// version, when set at build time with -ldflags "-X main.version=v1.2.3",
// overrides releaseVersion.
var version = ""

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return nil
		},
	}
}

// releaseTag is this build's version: VERSION's, or the one stamped at
// build time (make image).
func releaseTag() string {
	if version != "" {
		return version
	}
	return strings.TrimSpace(releaseVersion)
}

// versionLine names this build: the version, the source revision it was
// built from (and whether the tree had changes), Go and the etcd client.
// `run` compares it with the sidecar binary's before it uses that.
func versionLine() string {
	v, etcdVersion, revision := releaseTag(), "unknown", ""
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" || v == "(devel)" {
			v = info.Main.Version
		}
		for _, d := range info.Deps {
			if d.Path == "go.etcd.io/etcd/client/v3" {
				etcdVersion = d.Version
			}
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = ", source " + s.Value[:min(12, len(s.Value))] + revision
			case "vcs.modified":
				if s.Value == "true" {
					revision += "+changes"
				}
			}
		}
	}
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	return fmt.Sprintf("coordinator %s (%s, etcd client %s%s)", v, runtime.Version(), etcdVersion, revision)
}
