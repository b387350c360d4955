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
	name  string
	in    scope
	value func(v view) string
	// when, if not nil, says whether the variable is set at all.
	when func(v view) bool
}

// table is the trainer's contract: every variable, who is given it and how
// it is computed.
var table = []variable{
	// Generic.
	{name: ElasticJobID, in: everywhere, value: func(v view) string { return v.g.Job }},
	{name: ElasticGeneration, in: everywhere, value: func(v view) string { return strconv.FormatInt(v.g.Number, 10) }},
	{name: ElasticRestartCount, in: inProcess, value: func(v view) string { return itoa(v.g.Restarts) }},
	{name: ElasticNodeRank, in: inProcess, value: func(v view) string { return itoa(v.node.Member.Rank) }},
	{name: ElasticNNodes, in: inProcess, value: nnodes},
	{name: ElasticRole, in: inProcess, value: roleName},
	{name: ElasticCheckpointSocket, in: inProcess, value: func(v view) string { return v.node.Checkpoint.Socket },
		when: func(v view) bool { return v.node.Checkpoint.Socket != "" }},
	{name: PythonPath, in: inProcess, value: func(v view) string { return v.node.Checkpoint.PythonPath },
		when: func(v view) bool { return v.node.Checkpoint.PythonPath != "" }},

	// PyTorch (torchrun's names).
	{name: Rank, in: inProcess, value: globalRank},
	{name: LocalRank, in: inProcess, value: localRank},
	{name: WorldSize, in: everywhere, value: worldSize},
	{name: LocalWorldSize, in: inProcess, value: localSize},
	{name: GroupRank, in: inProcess, value: func(v view) string { return itoa(v.node.Member.Rank) }},
	{name: GroupWorldSize, in: inProcess, value: nnodes},
	{name: RoleName, in: inProcess, value: roleName},
	{name: RoleRank, in: inProcess, value: globalRank},
	{name: RoleWorldSize, in: inProcess, value: worldSize},
	{name: MasterAddr, in: everywhere, value: func(v view) string { return v.e().MasterAddr }},
	{name: MasterPort, in: everywhere, value: func(v view) string { return itoa(v.e().MasterPort) }},
	{name: TorchelasticRunID, in: inProcess, value: func(v view) string { return v.g.Job }},
	{name: TorchelasticRestartCount, in: inProcess, value: func(v view) string { return strconv.FormatInt(max(v.g.Number-1, 0), 10) }},
	{name: TorchelasticMaxRestarts, in: inProcess, value: func(v view) string { return itoa(v.g.MaxRestarts) }},

	// PaddlePaddle.
	{name: PaddleTrainersNum, in: everywhere, value: trainerProcesses},
	{name: PaddleTrainerEndpoints, in: everywhere, value: func(v view) string { return join(v.e().Trainers) }},
	{name: PaddleCurrentEndpoint, in: inProcess, value: func(v view) string { return net.JoinHostPort(v.node.Member.Host, itoa(v.port())) }},
	{name: PaddleTrainers, in: everywhere, value: func(v view) string { return join(v.e().TrainerHosts) }},
	{name: PaddlePServersIPPortList, in: everywhere, value: func(v view) string { return join(v.e().PServers) }},
	{name: PaddlePServerNum, in: inConfigMap, value: func(v view) string { return itoa(v.e().Nodes[membership.RolePS]) }},
	// paddle-operator's name, and PaddlePaddle's.
	{name: PaddleHeterEndpoints, in: everywhere, value: heters},
	{name: PaddleAllHeterTrainerIPPortList, in: inProcess, value: heters},
	{name: PaddlePort, in: inProcess, value: func(v view) string { return itoa(v.port()) }},
	{name: PodIP, in: inProcess, value: func(v view) string { return v.node.Member.Host }},
	{name: PaddleRankInNode, in: inProcess, value: localRank},
	{name: PaddleLocalRank, in: inProcess, value: localRank},
	{name: PaddleLocalSize, in: inProcess, value: localSize},
	{name: PaddleGlobalRank, in: inProcess, value: globalRank},
	{name: PaddleGlobalSize, in: inProcess, value: worldSize},
	{name: PaddleNNodes, in: everywhere, value: nnodes},
	// The ConfigMap has always joined the master's host and port as they
	// are, with no brackets around an IPv6 host.
	{name: PaddleMaster, in: everywhere, value: func(v view) string {
		if v.node == nil {
			return fmt.Sprintf("%s:%d", v.e().MasterAddr, v.e().MasterPort)
		}
		return net.JoinHostPort(v.e().MasterAddr, itoa(v.e().MasterPort))
	}},
	{name: TrainingRole, in: inProcess, value: func(v view) string { return paddleRole(v.role) }},
	{name: PaddlePServerID, in: inProcess, value: func(v view) string { return itoa(v.node.Member.Rank) },
		when: func(v view) bool { return v.role == membership.RolePS }},
	{name: PaddleTrainerID, in: inProcess, value: globalRank,
		when: func(v view) bool { return v.role != membership.RolePS }},
	{name: PaddleWithGloo, in: inProcess, value: func(v view) string { return itoa(v.node.Gloo) }, when: withGloo},
	{name: PaddleGlooRendezvous, in: inProcess, value: func(view) string { return "3" }, when: withGloo},
	{name: PaddleGlooHTTPEndpoint, in: inProcess, value: func(v view) string { return v.e().Gloo },
		when: func(v view) bool { return withGloo(v) && v.e().Gloo != "" }},

	// MindSpore.
	{name: MSSchedHost, in: everywhere, value: func(v view) string { return v.e().SchedulerAddr }},
	{name: MSSchedPort, in: everywhere, value: func(v view) string { return itoa(v.e().SchedulerPort) }},
	{name: MSWorkerNum, in: everywhere, value: trainerProcesses},
	// A process is told the number of servers, the ConfigMap the number of
	// their processes: the same unless a server runs several.
	{name: MSServerNum, in: everywhere, value: func(v view) string {
		if v.node == nil {
			return itoa(v.e().Processes[membership.RolePS])
		}
		return itoa(len(v.e().PServers))
	}},
	{name: MSNodeID, in: inProcess, value: func(v view) string { return fmt.Sprintf("%s-%d", v.role, v.global()) }},
	{name: MSRole, in: inProcess, value: func(v view) string { return msRole(v.role) }},
}

// each calls yield with the name and value of every variable of scope in
// that is set in view v of g, in the table's order.
func (g *Generation) each(in scope, v view, yield func(name, value string)) {
	v.g = g
	for _, x := range table {
		if x.in&in == 0 || (x.when != nil && !x.when(v)) {
			continue
		}
		yield(x.name, x.value(v))
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
func withGloo(v view) bool      { return v.node.Gloo > 0 }

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
