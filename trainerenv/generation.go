package trainerenv

import (
	"sort"

	"github.com/elastictraining/coordinator/membership"
)

// Generation is what every process of a generation is told alike: the job,
// the generation's counters and the addresses of its roles.
type Generation struct {
	Job    string
	Number int64
	// Restarts is the job's spent restart budget; MaxRestarts the budget.
	Restarts    int
	MaxRestarts int
	// Endpoints are the plan's addresses and counts (membership.Plan.Endpoints).
	Endpoints membership.Endpoints
}

// Of is generation p of job. p's members must be resolved: its rank table
// read (membership.Plan.Unresolved).
func Of(job string, p membership.Plan) Generation {
	return Generation{Job: job, Number: p.Generation, Restarts: p.Restarts, MaxRestarts: p.MaxRestarts, Endpoints: p.Endpoints()}
}

// Node is one member's place in a generation: what its processes are told.
type Node struct {
	Generation
	Member membership.Member
	// Gloo is PaddlePaddle's gloo level (withGloo: 0 none, 1 workers, 2
	// workers and servers), with rendezvous over HTTP; the store of a job
	// with parameter servers is Endpoints.Gloo, which the first server
	// starts (a collective job's first worker starts its own at its
	// endpoint).
	Gloo int
	// Checkpoint is where the node's sidecar keeps checkpoints in memory;
	// empty where it keeps none.
	Checkpoint Checkpoint
}

// Checkpoint says where a node's processes find the sidecar's checkpoint
// store (package memckpt) and its Python module.
type Checkpoint struct {
	// Socket is the store's abstract unix socket, '@name'.
	Socket string
	// PythonPath is the processes' whole PYTHONPATH: the directory of the
	// module elastic.py, then the path the user had, kept.
	PythonPath string
}

// Node is member m's place in g, whose sidecar runs with gloo level gloo.
func (g Generation) Node(m membership.Member, gloo int) Node {
	return Node{Generation: g, Member: m, Gloo: gloo}
}

// WorldSize is the number of processes of the node's role. Ranks of
// workers count worker processes only; a PS or scheduler node's ranks
// count within its role.
func (n Node) WorldSize() int { return n.Endpoints.Processes[n.Member.Role] }

// Env returns the environment of the process of local rank local, as
// NAME=value sorted: every variable of the table that a process is given.
func (n Node) Env(local int) []string {
	out := make([]string, 0, len(table))
	n.Generation.each(inProcess, view{role: n.Member.Role, node: &n, local: local}, func(name, value string) {
		out = append(out, name+"="+value)
	})
	sort.Strings(out)
	return out
}

// Shared returns the job-wide variables of the generation as its workers
// see them: the part of the table the bridge writes to the ConfigMap
// <job>-elastic.
func (g Generation) Shared() map[string]string {
	out := map[string]string{}
	g.each(inConfigMap, view{role: membership.RoleWorker}, func(name, value string) { out[name] = value })
	return out
}
