package fastpath

import (
	"os"

	"github.com/elastictraining/coordinator/guard"
)

func init() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case "guard":
		os.Exit(guard.Main(os.Args[2:], os.Stdout, os.Stderr))
	case "fence-watch":
		os.Exit(guard.WatchMain(os.Args[2:], os.Stderr))
	case "commit":
		os.Exit(guard.CommitMain(os.Args[2:], os.Getenv, os.Stderr))
	case "beat":
		os.Exit(guard.BeatMain(os.Args[2:], os.Getenv, os.Stderr))
	}
}
