package trainerenv

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/elastictraining/coordinator/membership"
)

// scope says who is given a variable.
type scope uint8

const (
	// inProcess: every process the sidecar starts (Node.Env).
	inProcess scope = 1 << iota
	// inConfigMap: the bridge's ConfigMap of the job (Generation.Shared).
	inConfigMap

	everywhere = inProcess | inConfigMap
)

// view is what a variable's value is computed from: one process of a node,
// or, for the ConfigMap, the job as its workers see it (node nil). Only
// variables in the ConfigMap are computed without a node.
type view struct {
	g     *Generation
	role  membership.Role
	node  *Node
	local int
}

func (v view) e() *membership.Endpoints { return &v.g.Endpoints }

// global is the process's global rank.
func (v view) global() int { return v.node.Member.GlobalRank + v.local }

// port is the process's own port.
func (v view) port() int { return v.node.Member.Ports[v.local] }

// nproc is the number of the node's processes.
func (v view) nproc() int { return len(v.node.Member.Ports) }

// variable is one variable of the contract.
type variable struct {
	name string
	in   scope
	// of is whose it is: a process is given the variables of its
	// framework and the project's.
	of    family
	value func(v view) string
	// when, if not nil, says whether the variable is set at all.
	when func(v view) bool
	// byDefault: set only where the inherited environment has none, as
	// the framework's launcher does (os.getenv(name, default)).
	byDefault bool
	// removed: taken out of the inherited environment, where the
	// framework's launcher would not have it and its presence would
	// change what the framework does. value is not used.
	removed func(v view) bool
}

var (
	allFrameworks = ours | torchFamily | paddleFamily | mindsporeFamily
	// paddles are the variables both Paddle's trainers and its launcher,
	// run per node, read alike.
	paddles = paddleFamily | paddleLaunchFamily
)

// always is a when or removed that always holds.
func always(view) bool { return true }

// table is the trainer's contract: every variable, who is given it and how
// it is computed. Each framework's part cites its own launcher's source in
// the comments; docs/frameworks.md has the same, per framework.
var table = []variable{
	// Generic: the project's own.
	{name: ElasticJobID, in: everywhere, of: ours, value: func(v view) string { return v.g.Job }},
	{name: ElasticGeneration, in: everywhere, of: ours, value: func(v view) string { return strconv.FormatInt(v.g.Number, 10) }},
	{name: ElasticRestartCount, in: inProcess, of: ours, value: func(v view) string { return itoa(v.g.Restarts) }},
	{name: ElasticNodeRank, in: inProcess, of: ours, value: func(v view) string { return itoa(v.node.Member.Rank) }},
	{name: ElasticNNodes, in: inProcess, of: ours, value: nnodes},
	// A framework's launcher run per node gives its processes their ranks;
	// the node's first would be every one's.
	{name: ElasticRank, in: inProcess, of: ours, value: globalRank, removed: perNodeLauncher},
	{name: ElasticLocalRank, in: inProcess, of: ours, value: localRank, removed: perNodeLauncher},
	{name: ElasticWorldSize, in: inProcess, of: ours, value: worldSize},
	{name: ElasticRole, in: inProcess, of: ours, value: roleName},
	{name: ElasticFramework, in: inProcess, of: ours, value: func(v view) string { return v.node.Framework.String() }},
	{name: ElasticCheckpointSocket, in: inProcess, of: ours, value: func(v view) string { return v.node.Checkpoint.Socket },
		when: func(v view) bool { return v.node.Checkpoint.Socket != "" }},
	{name: ElasticCheckpointIncarnation, in: inProcess, of: ours, value: func(v view) string { return v.node.Checkpoint.Incarnation },
		when: func(v view) bool { return v.node.Checkpoint.Incarnation != "" }},
	{name: PythonPath, in: inProcess, of: ours, value: func(v view) string { return v.node.Checkpoint.PythonPath },
		when: func(v view) bool { return v.node.Checkpoint.PythonPath != "" }},

	// PyTorch: torchrun's, LocalElasticAgent._start_workers in
	// torch/distributed/elastic/agent/server/local_elastic_agent.py, and
	// OMP_NUM_THREADS from torch/distributed/run.py.
	{name: Rank, in: inProcess, of: torchFamily, value: globalRank},
	{name: LocalRank, in: inProcess, of: torchFamily, value: localRank},
	{name: WorldSize, in: everywhere, of: torchFamily, value: worldSize},
	{name: LocalWorldSize, in: inProcess, of: torchFamily, value: localSize},
	{name: GroupRank, in: inProcess, of: torchFamily, value: func(v view) string { return itoa(v.node.Member.Rank) }},
	{name: GroupWorldSize, in: inProcess, of: torchFamily, value: nnodes},
	{name: RoleName, in: inProcess, of: torchFamily, value: roleName},
	{name: RoleRank, in: inProcess, of: torchFamily, value: globalRank},
	{name: RoleWorldSize, in: inProcess, of: torchFamily, value: worldSize},
	{name: MasterAddr, in: everywhere, of: torchFamily, value: func(v view) string { return v.e().MasterAddr }},
	{name: MasterPort, in: everywhere, of: torchFamily, value: func(v view) string { return itoa(v.e().MasterPort) }},
	{name: TorchelasticRunID, in: inProcess, of: torchFamily, value: func(v view) string { return v.g.Job }},
	{name: TorchelasticRestartCount, in: inProcess, of: torchFamily, value: func(v view) string { return strconv.FormatInt(max(v.g.Number-1, 0), 10) }},
	{name: TorchelasticMaxRestarts, in: inProcess, of: torchFamily, value: func(v view) string { return itoa(v.g.MaxRestarts) }},
	// Rank 0 hosts the store at MASTER_PORT: there is no agent's store.
	{name: TorchelasticUseAgentStore, in: inProcess, of: torchFamily, value: func(view) string { return "False" }},
	{name: NCCLAsyncErrorHandling, in: inProcess, of: torchFamily, value: func(view) string { return "1" }, byDefault: true},
	{name: TorchNCCLAsyncErrorHandling, in: inProcess, of: torchFamily, value: func(view) string { return "1" }, byDefault: true},
	{name: OMPNumThreads, in: inProcess, of: torchFamily, value: func(view) string { return "1" }, byDefault: true,
		when: func(v view) bool { return v.nproc() > 1 }},

	// PaddlePaddle: paddle.distributed.launch's collective and parameter
	// server controllers, python/paddle/distributed/launch/controllers/
	// collective.py and ps.py; fleetrun's and paddle-operator's names for
	// the rest (see the package's documentation).
	{name: PaddleTrainersNum, in: everywhere, of: paddleFamily, value: trainerProcesses},
	{name: PaddleTrainerEndpoints, in: everywhere, of: paddles, value: func(v view) string { return join(v.e().Trainers) }, removed: perNodeLauncher},
	{name: PaddleCurrentEndpoint, in: inProcess, of: paddleFamily, value: func(v view) string { return net.JoinHostPort(v.node.Member.Host, itoa(v.port())) }},
	{name: PaddleTrainers, in: everywhere, of: paddles, value: func(v view) string { return join(v.e().TrainerHosts) }, removed: perNodeLauncher},
	// A collective job's processes get no server or heterogeneous list,
	// not even an empty one: collective.py sets none, and fleet.init()'s
	// role maker (python/paddle/distributed/fleet/base/role_maker.py,
	// PaddleCloudRoleMaker._ps_env) takes a job with
	// PADDLE_PSERVERS_IP_PORT_LIST set for a parameter-server job, and
	// counts its workers differently (PaddlePaddle 3.3.1, run).
	{name: PaddlePServersIPPortList, in: everywhere, of: paddleFamily, value: func(v view) string { return join(v.e().PServers) },
		when: inConfigMapOrWithServers},
	{name: PaddlePServerNum, in: inConfigMap, of: paddleFamily, value: func(v view) string { return itoa(v.e().Nodes[membership.RolePS]) }},
	// paddle-operator's name, and PaddlePaddle's.
	{name: PaddleHeterEndpoints, in: everywhere, of: paddleFamily, value: heters, when: inConfigMapOrWithServers},
	{name: PaddleAllHeterTrainerIPPortList, in: inProcess, of: paddleFamily, value: heters, when: hasServers},
	{name: PaddlePort, in: inProcess, of: paddleFamily, value: func(v view) string { return itoa(v.port()) }},
	{name: PodIP, in: inProcess, of: paddles, value: func(v view) string { return v.node.Member.Host }},
	{name: PaddleRankInNode, in: inProcess, of: paddleFamily, value: localRank},
	{name: PaddleLocalRank, in: inProcess, of: paddleFamily, value: localRank},
	{name: PaddleLocalSize, in: inProcess, of: paddleFamily, value: localSize},
	{name: PaddleGlobalRank, in: inProcess, of: paddleFamily, value: globalRank},
	{name: PaddleGlobalSize, in: inProcess, of: paddleFamily, value: worldSize},
	{name: PaddleNNodes, in: everywhere, of: paddles, value: nnodes},
	// The ConfigMap has always joined the master's host and port as they
	// are, with no brackets around an IPv6 host. Paddle's launcher, run
	// per node, binds its HTTP rendezvous there on the first node: the
	// port nothing else of the generation uses when the command is it.
	{name: PaddleMaster, in: everywhere, of: paddles, value: func(v view) string {
		if v.node == nil {
			return fmt.Sprintf("%s:%d", v.e().MasterAddr, v.e().MasterPort)
		}
		return net.JoinHostPort(v.e().MasterAddr, itoa(v.e().MasterPort))
	}},
	{name: TrainingRole, in: inProcess, of: paddleFamily, value: func(v view) string { return paddleRole(v.role) }},
	// ps.py gives PADDLE_ROLE with TRAINING_ROLE in a job with servers.
	{name: PaddleRole, in: inProcess, of: paddleFamily, value: func(v view) string { return paddleRole(v.role) }, when: hasServers},
	{name: PaddlePServerID, in: inProcess, of: paddleFamily, value: func(v view) string { return itoa(v.node.Member.Rank) },
		when: func(v view) bool { return v.role == membership.RolePS }},
	{name: PaddleTrainerID, in: inProcess, of: paddles, value: globalRank,
		when: func(v view) bool { return v.role != membership.RolePS }, removed: perNodeLauncher},
	// collective.py: FLAGS_selected_gpus is every device for one process,
	// device l for process l of several; with no device the backend is
	// gloo, which init_parallel_env (python/paddle/distributed/parallel.py)
	// reads from PADDLE_DISTRI_BACKEND.
	{name: FlagsSelectedGPUs, in: inProcess, of: paddleFamily, value: selectedDevices,
		when: func(v view) bool { return len(v.node.Devices) > 0 }},
	{name: PaddleDistriBackend, in: inProcess, of: paddleFamily, value: func(view) string { return "gloo" },
		when: func(v view) bool { return len(v.node.Devices) == 0 && !hasServers(v) }},
	{name: PaddleWithGloo, in: inProcess, of: paddleFamily, value: func(v view) string { return itoa(v.node.gloo(v)) }, when: withGloo},
	{name: PaddleGlooRendezvous, in: inProcess, of: paddleFamily, value: func(view) string { return "3" }, when: withGloo},
	{name: PaddleGlooHTTPEndpoint, in: inProcess, of: paddleFamily, value: func(v view) string { return v.e().Gloo },
		when: func(v view) bool { return withGloo(v) && v.e().Gloo != "" }},

	// paddle.distributed.launch run per node: what its own flags would say
	// (python/paddle/distributed/launch/context/args_envs.py), and the
	// node's reserved ports for its processes' endpoints (FLAGS_FIXED_PORT,
	// context/node.py, offset there by the node's rank).
	{name: PaddleRank, in: inProcess, of: paddleLaunchFamily, value: func(v view) string { return itoa(v.node.Member.Rank) }},
	{name: PaddleNProcPerNode, in: inProcess, of: paddleLaunchFamily, value: localSize},
	{name: PaddleJobID, in: inProcess, of: paddleLaunchFamily, value: func(v view) string { return v.g.Job }},
	{name: FlagsFixedPort, in: inProcess, of: paddleLaunchFamily, value: func(v view) string { return itoa(v.port() - v.node.Member.Rank) },
		when: func(v view) bool { return v.port() > v.node.Member.Rank }},
	// Variables that would turn it into an elastic system of its own
	// (fleet/elastic/__init__.py) or override the master, the node count
	// or the rank (launch/plugins/__init__.py, launch/main.py), as
	// PADDLE_TRAINER_ENDPOINTS, PADDLE_TRAINERS and PADDLE_TRAINER_ID do.
	{name: PaddleElasticServer, in: inProcess, of: paddleLaunchFamily, removed: always},
	{name: PaddleElasticJobID, in: inProcess, of: paddleLaunchFamily, removed: always},
	{name: PaddleElasticNP, in: inProcess, of: paddleLaunchFamily, removed: always},
	{name: PaddleElasticTimeout, in: inProcess, of: paddleLaunchFamily, removed: always},
	{name: PaddleElasticFaultToleranceLevel, in: inProcess, of: paddleLaunchFamily, removed: always},
	{name: PaddleElasticLevel, in: inProcess, of: paddleLaunchFamily, removed: always},
	{name: PaddleIPs, in: inProcess, of: paddleLaunchFamily, removed: always},
	{name: DistributedTrainerEndpoints, in: inProcess, of: paddleLaunchFamily, removed: always},
	// And those of the flags it is refused: a parameter-server mode of its
	// own (launch/context/args_envs.py).
	{name: PaddleRunMode, in: inProcess, of: paddleLaunchFamily, removed: always},
	{name: PaddleServersEndpoints, in: inProcess, of: paddleLaunchFamily, removed: always},
	{name: PaddleTrainersEndpoints, in: inProcess, of: paddleLaunchFamily, removed: always},
	{name: PaddleServerNum, in: inProcess, of: paddleLaunchFamily, removed: always},
	{name: PaddleTrainerNum, in: inProcess, of: paddleLaunchFamily, removed: always},

	// MindSpore: msrun, mindspore/python/mindspore/parallel/cluster/
	// process_entity/_api.py (_MetaServerNode, _ComputeGraphNode,
	// _ProcessManager.run); MS_SERVER_NUM, which parameter-server mode
	// reads, in mindspore/ccsrc/include/backend/distributed/constants.h.
	{name: MSSchedHost, in: everywhere, of: mindsporeFamily, value: func(v view) string { return v.e().SchedulerAddr }},
	{name: MSSchedPort, in: everywhere, of: mindsporeFamily, value: func(v view) string { return itoa(v.e().SchedulerPort) }},
	{name: MSWorkerNum, in: everywhere, of: mindsporeFamily, value: trainerProcesses},
	// A process is told the number of servers, the ConfigMap the number of
	// their processes: the same unless a server runs several.
	{name: MSServerNum, in: everywhere, of: mindsporeFamily, value: func(v view) string {
		if v.node == nil {
			return itoa(v.e().Processes[membership.RolePS])
		}
		return itoa(len(v.e().PServers))
	}},
	// The rank within the role: MindSpore's scheduler takes a numeric node
	// id as the rank (meta_server_node.cc, ProcessRegister). msrun gives
	// the scheduler none, and any inherited one would collide. The
	// scheduler keys every role's nodes by id alone, so in a job with
	// servers a number would be a worker's and a server's at once: there
	// ids are the role and the rank, which it ranks by host and then by
	// id compared as strings (ReassignNodeRank), zero-padded to sort as
	// the ranks do on one host.
	{name: MSNodeID, in: inProcess, of: mindsporeFamily, value: func(v view) string {
		if hasServers(v) {
			return fmt.Sprintf("%s-%06d", v.role, v.global())
		}
		return globalRank(v)
	}, when: notScheduler, removed: isScheduler},
	{name: MSRole, in: inProcess, of: mindsporeFamily, value: func(v view) string { return msRole(v.role) }},
	{name: RankID, in: inProcess, of: mindsporeFamily, value: func(v view) string {
		if isScheduler(v) {
			return "0"
		}
		return globalRank(v)
	}},
	{name: RankSize, in: inProcess, of: mindsporeFamily, value: trainerProcesses},
	// msrun's is the local index; on a node of fewer devices than
	// processes, shared as FLAGS_selected_gpus is.
	{name: DeviceID, in: inProcess, of: mindsporeFamily, value: func(v view) string {
		if d := v.node.Devices; len(d) > 0 {
			return d[v.local%len(d)]
		}
		return localRank(v)
	}, when: notScheduler},
	{name: MSTopoTimeout, in: inProcess, of: mindsporeFamily, value: func(view) string { return "600" }, byDefault: true},
}

// each calls yield with the name and value of every variable of scope in
// and families fam that is set in view v of g, in the table's order; a
// variable to take out of the inherited environment has removed true.
func (g *Generation) each(in scope, fam family, v view, yield func(name, value string, removed bool)) {
	v.g = g
	for _, x := range table {
		if x.in&in == 0 || x.of&fam == 0 {
			continue
		}
		switch {
		case x.removed != nil && x.removed(v):
			yield(x.name, "", true)
		case x.value == nil || (x.when != nil && !x.when(v)):
		case x.byDefault && v.node != nil && v.node.Inherited != nil && v.node.Inherited(x.name):
		default:
			yield(x.name, x.value(v), false)
		}
	}
}

func itoa(n int) string         { return strconv.Itoa(n) }
func join(list []string) string { return strings.Join(list, ",") }
func roleName(v view) string    { return string(v.role) }
func globalRank(v view) string  { return itoa(v.global()) }
func localRank(v view) string   { return itoa(v.local) }
func localSize(v view) string   { return itoa(v.nproc()) }
func nnodes(v view) string      { return itoa(v.e().Nodes[v.role]) }
func worldSize(v view) string   { return itoa(v.e().Processes[v.role]) }
func heters(v view) string      { return join(v.e().Heters) }
func withGloo(v view) bool      { return v.node.gloo(v) > 0 }
func hasServers(v view) bool    { return v.e().Nodes[membership.RolePS] > 0 }

// inConfigMapOrWithServers: the job's ConfigMap, which has always had the
// variable, or a process of a job with parameter servers.
func inConfigMapOrWithServers(v view) bool { return v.node == nil || hasServers(v) }

// perNodeLauncher: the process is a framework's launcher, which a
// variable of its trainers' would mislead (PADDLE_TRAINER_ENDPOINTS and
// PADDLE_TRAINER_ID override its master, node count and rank:
// python/paddle/distributed/launch/plugins/__init__.py and
// context/args_envs.py).
func perNodeLauncher(v view) bool { return v.node != nil && v.node.Launcher != NoLauncher }
func isScheduler(v view) bool     { return v.role == membership.RoleScheduler }
func notScheduler(v view) bool    { return !isScheduler(v) }

// selectedDevices is process l's devices as collective.py gives them: all
// of the node's to its only process, one each to several (the node's
// device l, or l modulo their number where there are fewer).
func selectedDevices(v view) string {
	d := v.node.Devices
	if v.nproc() == 1 {
		return join(d)
	}
	return d[v.local%len(d)]
}

// trainerProcesses counts the workers' endpoints, one per process.
func trainerProcesses(v view) string { return itoa(len(v.e().Trainers)) }

func msRole(role membership.Role) string {
	switch role {
	case membership.RolePS:
		return "MS_PSERVER"
	case membership.RoleScheduler:
		return "MS_SCHED"
	}
	return "MS_WORKER"
}

func paddleRole(role membership.Role) string {
	switch role {
	case membership.RolePS:
		return "PSERVER"
	case membership.RoleHeter:
		return "HETER_TRAINER"
	}
	return "TRAINER"
}
