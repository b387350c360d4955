package launcher

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
)

// Topology is everything a node's processes are told about the generation
// they run in. Ranks of workers count worker processes only; a PS or
// scheduler node's ranks count within its role.
type Topology struct {
	JobID      string
	Generation int64
	// Restarts is the job's spent restart budget; MaxRestarts the budget.
	Restarts    int
	MaxRestarts int
	// Role is worker, ps or scheduler.
	Role string
	// NodeRank is the node's rank within its role; NNodes the number of
	// nodes of that role.
	NodeRank int
	NNodes   int
	// GlobalRankBase is the global rank of the node's first process; the
	// process with local rank l has GlobalRankBase+l.
	GlobalRankBase int
	// WorldSize is the number of processes of the role.
	WorldSize int
	// Host is this node's address; Ports one port per local process.
	Host  string
	Ports []int
	// MasterAddr and MasterPort serve the rank-0 rendezvous store.
	MasterAddr string
	MasterPort int
	// TrainerEndpoints are the worker processes' host:port in global rank
	// order; TrainerHosts the worker nodes' hosts in rank order.
	TrainerEndpoints []string
	TrainerHosts     []string
	// PServerEndpoints are the PS nodes' host:port in rank order.
	PServerEndpoints []string
	// HeterEndpoints are the heterogeneous trainers' host:port.
	HeterEndpoints []string
	// SchedulerHost and SchedulerPort are the MindSpore scheduler's address:
	// the scheduler node's if there is one, else the master's.
	SchedulerHost string
	SchedulerPort int
	// Gloo is PaddlePaddle's gloo level (withGloo: 0 none, 1 workers, 2
	// workers and servers), with rendezvous over HTTP; GlooEndpoint is
	// the store of a job with parameter servers, which the first server
	// starts (a collective job's first worker starts its own at its
	// endpoint).
	Gloo         int
	GlooEndpoint string
}

// Env returns the variables of DESIGN §5 for the process with local rank
// local: generic, PyTorch, PaddlePaddle and MindSpore names.
func (t Topology) Env(local int) []string {
	nproc := len(t.Ports)
	global := t.GlobalRankBase + local
	endpoint := net.JoinHostPort(t.Host, strconv.Itoa(t.Ports[local]))
	master := net.JoinHostPort(t.MasterAddr, strconv.Itoa(t.MasterPort))
	itoa := strconv.Itoa
	env := map[string]string{
		// Generic.
		"ELASTIC_JOB_ID":        t.JobID,
		"ELASTIC_GENERATION":    strconv.FormatInt(t.Generation, 10),
		"ELASTIC_RESTART_COUNT": itoa(t.Restarts),
		"ELASTIC_NODE_RANK":     itoa(t.NodeRank),
		"ELASTIC_NNODES":        itoa(t.NNodes),
		"ELASTIC_ROLE":          t.Role,
		// PyTorch (torchrun's names).
		"RANK":                       itoa(global),
		"LOCAL_RANK":                 itoa(local),
		"WORLD_SIZE":                 itoa(t.WorldSize),
		"LOCAL_WORLD_SIZE":           itoa(nproc),
		"GROUP_RANK":                 itoa(t.NodeRank),
		"GROUP_WORLD_SIZE":           itoa(t.NNodes),
		"ROLE_NAME":                  t.Role,
		"ROLE_RANK":                  itoa(global),
		"ROLE_WORLD_SIZE":            itoa(t.WorldSize),
		"MASTER_ADDR":                t.MasterAddr,
		"MASTER_PORT":                itoa(t.MasterPort),
		"TORCHELASTIC_RUN_ID":        t.JobID,
		"TORCHELASTIC_RESTART_COUNT": strconv.FormatInt(max(t.Generation-1, 0), 10),
		"TORCHELASTIC_MAX_RESTARTS":  itoa(t.MaxRestarts),
		// PaddlePaddle.
		"PADDLE_TRAINERS_NUM":          itoa(len(t.TrainerEndpoints)),
		"PADDLE_TRAINER_ENDPOINTS":     strings.Join(t.TrainerEndpoints, ","),
		"PADDLE_CURRENT_ENDPOINT":      endpoint,
		"PADDLE_TRAINERS":              strings.Join(t.TrainerHosts, ","),
		"PADDLE_PSERVERS_IP_PORT_LIST": strings.Join(t.PServerEndpoints, ","),
		// paddle-operator's name, and PaddlePaddle's.
		"PADDLE_HETER_ENDPOINTS":                strings.Join(t.HeterEndpoints, ","),
		"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST": strings.Join(t.HeterEndpoints, ","),
		"PADDLE_PORT":                           itoa(t.Ports[local]),
		"POD_IP":                                t.Host,
		"PADDLE_RANK_IN_NODE":                   itoa(local),
		"PADDLE_LOCAL_RANK":                     itoa(local),
		"PADDLE_LOCAL_SIZE":                     itoa(nproc),
		"PADDLE_GLOBAL_RANK":                    itoa(global),
		"PADDLE_GLOBAL_SIZE":                    itoa(t.WorldSize),
		"PADDLE_NNODES":                         itoa(t.NNodes),
		"PADDLE_MASTER":                         master,
		// MindSpore.
		"MS_SCHED_HOST": t.SchedulerHost,
		"MS_SCHED_PORT": itoa(t.SchedulerPort),
		"MS_WORKER_NUM": itoa(len(t.TrainerEndpoints)),
		"MS_SERVER_NUM": itoa(len(t.PServerEndpoints)),
		"MS_NODE_ID":    fmt.Sprintf("%s-%d", t.Role, global),
		"MS_ROLE":       msRole(t.Role),
		"TRAINING_ROLE": paddleRole(t.Role),
	}
	switch t.Role {
	case "ps":
		env["PADDLE_PSERVER_ID"] = itoa(t.NodeRank)
	default:
		env["PADDLE_TRAINER_ID"] = itoa(global)
	}
	if t.Gloo > 0 {
		env["PADDLE_WITH_GLOO"] = itoa(t.Gloo)
		env["PADDLE_GLOO_RENDEZVOUS"] = "3"
		if t.GlooEndpoint != "" {
			env["PADDLE_GLOO_HTTP_ENDPOINT"] = t.GlooEndpoint
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func msRole(role string) string {
	switch role {
	case "ps":
		return "MS_PSERVER"
	case "scheduler":
		return "MS_SCHED"
	}
	return "MS_WORKER"
}

func paddleRole(role string) string {
	switch role {
	case "ps":
		return "PSERVER"
	case "heter":
		return "HETER_TRAINER"
	}
	return "TRAINER"
}

// mergeEnv returns base with every variable of over set to over's value.
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
	return append(out, over...)
}
