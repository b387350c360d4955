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
	Options
}

// Options are what a node's sidecar adds to the generation: how it runs its
// processes.
type Options struct {
	// Gloo is PaddlePaddle's gloo level (withGloo: 0 none, 1 workers, 2
	// workers and servers), with rendezvous over HTTP; the store of a job
	// with parameter servers is Endpoints.Gloo, which the first server
	// starts (a collective job's first worker starts its own at its
	// endpoint). Below 0: Paddle's launcher's default, 1 in a job with
	// parameter servers (launch/controllers/ps.py), 0 in a collective one.
	Gloo int
	// Checkpoint is where the node's sidecar keeps checkpoints in memory;
	// empty where it keeps none.
	Checkpoint Checkpoint
	// Framework is whose contract the processes get.
	Framework Framework
	// Launcher is the framework's launcher the command is, run once per
	// node, or NoLauncher.
	Launcher Launcher
	// Devices are the node's accelerators as its processes see them
	// (CUDA's indices: 0 is the first visible), empty on a CPU node.
	Devices []string
	// Inherited, if set, says whether the processes' inherited
	// environment has a variable: a framework's default does not replace
	// the user's.
	Inherited func(name string) bool
}

// gloo is the node's gloo level in view v, its default resolved.
func (n *Node) gloo(v view) int {
	if n.Gloo >= 0 {
		return n.Gloo
	}
	if hasServers(v) && n.Framework != PyTorch && n.Framework != MindSpore {
		return 1
	}
	return 0
}

// Checkpoint says where a node's processes find the sidecar's checkpoint
// store (package memckpt) and its Python module.
type Checkpoint struct {
	// Socket is the store's abstract unix socket, '@name'.
	Socket string
	// Incarnation is the job's life the store stamps its copies with.
	Incarnation string
	// PythonPath is the processes' whole PYTHONPATH: the directory of the
	// package elastic, then the path the user had, kept.
	PythonPath string
}

// Node is member m's place in g, whose sidecar runs with gloo level gloo
// and no other option.
func (g Generation) Node(m membership.Member, gloo int) Node {
	return Node{Generation: g, Member: m, Options: Options{Gloo: gloo}}
}

// NodeWith is member m's place in g, whose sidecar runs with options o.
func (g Generation) NodeWith(m membership.Member, o Options) Node {
	return Node{Generation: g, Member: m, Options: o}
}

// Processes is how many processes the sidecar starts for the node: one
// per port, or one, which starts the others, where the command is a
// framework's launcher.
func (n Node) Processes() int {
	if n.Launcher != NoLauncher {
		return 1
	}
	return len(n.Member.Ports)
}

// WorldSize is the number of processes of the node's role. Ranks of
// workers count worker processes only; a PS or scheduler node's ranks
// count within its role.
func (n Node) WorldSize() int { return n.Endpoints.Processes[n.Member.Role] }

// Env returns the environment of the process of local rank local, as
// NAME=value sorted: every variable of the table that a process is given.
// A variable to take out of the inherited environment is NAME alone.
func (n Node) Env(local int) []string {
	out := make([]string, 0, len(table))
	n.Generation.each(inProcess, families(n.Framework, n.Launcher, n.Member.Role), view{role: n.Member.Role, node: &n, local: local},
		func(name, value string, removed bool) {
			if removed {
				out = append(out, name)
			} else {
				out = append(out, name+"="+value)
			}
		})
	sort.Strings(out)
	return out
}

// Shared returns the job-wide variables of the generation as its workers
// see them: the part of the table the bridge writes to the ConfigMap
// <job>-elastic.
func (g Generation) Shared() map[string]string {
	out := map[string]string{}
	g.each(inConfigMap, allFrameworks, view{role: membership.RoleWorker}, func(name, value string, removed bool) {
		if !removed {
			out[name] = value
		}
	})
	return out
}
