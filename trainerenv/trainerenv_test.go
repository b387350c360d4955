package trainerenv_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/trainerenv"
)

func TestNode(t *testing.T) {
	w0 := membership.Member{Node: "w0", Role: membership.RoleWorker, Rank: 0, GlobalRank: 0, Host: "10.0.0.1", Ports: []int{7000, 7001}, NProc: 2}
	w1 := membership.Member{Node: "w1", Role: membership.RoleWorker, Rank: 1, GlobalRank: 2, Host: "10.0.0.2", Ports: []int{7000, 7001}, NProc: 2}
	ps0 := membership.Member{Node: "p0", Role: membership.RolePS, Rank: 0, Host: "10.0.1.1", Ports: []int{8000}, NProc: 1}
	ps1 := membership.Member{Node: "p1", Role: membership.RolePS, Rank: 1, Host: "10.0.1.2", Ports: []int{8000}, NProc: 1}
	plan := membership.Plan{Generation: 4, Phase: membership.PhaseRun, Members: []membership.Member{w0, w1, ps0, ps1},
		WorldSize: 4, Master: "10.0.0.1:29500", Gloo: "10.0.1.1:29500", Restarts: 1, MaxRestarts: 3}
	g := trainerenv.Of("j", plan)

	worker := env(g.Node(w1, 0).Env(1))
	assert.Equal(t, "1", worker[trainerenv.ElasticNodeRank])
	assert.Equal(t, "2", worker[trainerenv.ElasticNNodes])
	assert.Equal(t, "3", worker[trainerenv.Rank], "the node's first process has rank 2")
	assert.Equal(t, "4", worker[trainerenv.WorldSize])
	assert.Equal(t, "10.0.0.1:7000,10.0.0.1:7001,10.0.0.2:7000,10.0.0.2:7001", worker[trainerenv.PaddleTrainerEndpoints])
	assert.Equal(t, "10.0.0.2:7001", worker[trainerenv.PaddleCurrentEndpoint])
	assert.Equal(t, "10.0.0.1,10.0.0.2", worker[trainerenv.PaddleTrainers])
	assert.Equal(t, "10.0.1.1:8000,10.0.1.2:8000", worker[trainerenv.PaddlePServersIPPortList])
	assert.Equal(t, "10.0.0.1", worker[trainerenv.MasterAddr])
	assert.Equal(t, "29500", worker[trainerenv.MasterPort])
	assert.Equal(t, "10.0.0.1", worker[trainerenv.MSSchedHost], "no scheduler node: the master")
	assert.NotContains(t, worker, trainerenv.PaddleWithGloo)

	ps := g.Node(ps1, 2)
	assert.Equal(t, 2, ps.WorldSize(), "PS processes count within their role")
	psEnv := env(ps.Env(0))
	assert.Equal(t, "2", psEnv[trainerenv.ElasticNNodes])
	assert.Equal(t, "2", psEnv[trainerenv.PaddleWithGloo])
	assert.Equal(t, "10.0.1.1:29500", psEnv[trainerenv.PaddleGlooHTTPEndpoint], "the first server's store")
	assert.Equal(t, "1", psEnv[trainerenv.PaddlePServerID])
	assert.NotContains(t, psEnv, trainerenv.PaddleTrainerID)
	assert.Equal(t, "PSERVER", psEnv[trainerenv.TrainingRole])
}

// TestSharedIsWhatAWorkerIsTold checks that the ConfigMap is a projection
// of a worker process's environment, but for the variables the two have
// always told apart.
func TestSharedIsWhatAWorkerIsTold(t *testing.T) {
	differ := map[string]string{
		"paddle-ps": trainerenv.MSServerNum, // a server of two processes
		"ipv6":      trainerenv.PaddleMaster,
	}
	for _, tc := range envCases() {
		t.Run(tc.name, func(t *testing.T) {
			g := trainerenv.Of(tc.job, tc.plan)
			var worker membership.Member
			for _, m := range tc.plan.Members {
				if m.Role == membership.RoleWorker {
					worker = m
					break
				}
			}
			told := env(g.Node(worker, tc.gloo).Env(0))
			for k, v := range g.Shared() {
				switch k {
				case trainerenv.PaddlePServerNum: // the ConfigMap's alone
					assert.NotContains(t, told, k)
				case differ[tc.name]:
					assert.NotEqual(t, v, told[k], k)
				default:
					assert.Equal(t, v, told[k], k)
				}
			}
		})
	}
}

// TestShared is the ConfigMap the bridge writes for a job with a scheduler
// and servers.
func TestShared(t *testing.T) {
	m := func(node string, role membership.Role, rank int, host string, ports ...int) membership.Member {
		return membership.Member{Node: node, Role: role, Rank: rank, Host: host, Ports: ports, NProc: len(ports)}
	}
	p := membership.Plan{Generation: 7, Phase: membership.PhaseRun, WorldSize: 4, Master: "w0.ns.svc:29500", Members: []membership.Member{
		m("w0", membership.RoleWorker, 0, "w0.ns.svc", 36000, 36001),
		m("w1", membership.RoleWorker, 1, "w1.ns.svc", 36000, 36001),
		m("p0", membership.RolePS, 0, "p0.ns.svc", 36000),
		m("p1", membership.RolePS, 1, "p1.ns.svc", 36000),
		m("s0", membership.RoleScheduler, 0, "s0.ns.svc", 8081),
	}}
	assert.Equal(t, map[string]string{
		"ELASTIC_JOB_ID":               "wd",
		"ELASTIC_GENERATION":           "7",
		"PADDLE_TRAINER_ENDPOINTS":     "w0.ns.svc:36000,w0.ns.svc:36001,w1.ns.svc:36000,w1.ns.svc:36001",
		"PADDLE_TRAINERS":              "w0.ns.svc,w1.ns.svc",
		"PADDLE_TRAINERS_NUM":          "4",
		"PADDLE_PSERVERS_IP_PORT_LIST": "p0.ns.svc:36000,p1.ns.svc:36000",
		"PADDLE_PSERVER_NUM":           "2",
		"PADDLE_NNODES":                "2",
		"PADDLE_HETER_ENDPOINTS":       "",
		"PADDLE_MASTER":                "w0.ns.svc:29500",
		"MASTER_ADDR":                  "w0.ns.svc",
		"MASTER_PORT":                  "29500",
		"WORLD_SIZE":                   "4",
		"MS_SCHED_HOST":                "s0.ns.svc",
		"MS_SCHED_PORT":                "8081",
		"MS_WORKER_NUM":                "4",
		"MS_SERVER_NUM":                "2",
	}, trainerenv.Of("wd", p).Shared())
}

func env(kvs []string) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}
