package launcher

import (
	"strings"

	"github.com/elastictraining/coordinator/guard"
)

// Procs is one generation of a node's processes: who they are, for their
// output's prefixes, their log files and exit reports, and the environment
// of each, which the caller builds (the sidecar's is package trainerenv's).
type Procs struct {
	Generation int64
	// Role is worker ("" too), ps, heter or scheduler.
	Role string
	// NodeRank is the node's rank within its role.
	NodeRank int
	// GlobalRankBase is the global rank of the node's first process; the
	// process with local rank l has GlobalRankBase+l.
	GlobalRankBase int
	// WorldSize is the number of processes of the role.
	WorldSize int
	// Env holds the variables of each process, by local rank, set over
	// Config.Env: one process is started per entry. An entry NAME without
	// '=' takes NAME out of Config.Env.
	Env [][]string
	// Watch says how the guard watches the processes for hangs
	// (Config.OnHung, Config.OnProgress); nil watches nothing.
	Watch *guard.Watch
}

// mergeEnv returns base with every variable of over set to over's value,
// and without those over names alone.
func mergeEnv(base, over []string) []string {
	seen := make(map[string]bool, len(over))
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		seen[k] = true
	}
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !seen[k] {
			out = append(out, kv)
		}
	}
	for _, kv := range over {
		if strings.Contains(kv, "=") {
			out = append(out, kv)
		}
	}
	return out
}
