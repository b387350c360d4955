package bridge

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/membership"
)

func TestDesiredReplicas(t *testing.T) {
	spec := func(np membership.NP, ps int, clean membership.CleanPodPolicy) *membership.Spec {
		s := membership.DefaultSpec(np)
		s.PS, s.CleanPodPolicy = ps, clean
		return &s
	}
	status := func(p membership.JobPhase) *membership.Status { return &membership.Status{Phase: p} }
	none := map[membership.Role]int{membership.RoleWorker: 0, membership.RolePS: 0, membership.RoleScheduler: 0, membership.RoleHeter: 0}
	for _, tc := range []struct {
		name string
		rec  membership.JobRecords
		want map[membership.Role]int
	}{
		{"no spec: hands off", membership.JobRecords{}, nil},
		{"exact np", membership.JobRecords{Spec: spec(membership.NP{Min: 4, Max: 4}, 2, membership.CleanPodNever)},
			map[membership.Role]int{membership.RoleWorker: 4, membership.RolePS: 2, membership.RoleScheduler: 0, membership.RoleHeter: 0}},
		{"a range asks for its maximum", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 8}, 0, membership.CleanPodNever), Status: status(membership.JobRunning)},
			map[membership.Role]int{membership.RoleWorker: 8, membership.RolePS: 0, membership.RoleScheduler: 0, membership.RoleHeter: 0}},
		{"Never keeps the pods", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodNever), Status: status(membership.JobSucceeded)}, nil},
		{"Always removes them", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodAlways), Status: status(membership.JobFailed)}, none},
		{"OnCompletion after success", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodOnCompletion), Status: status(membership.JobSucceeded)}, none},
		{"OnCompletion keeps a failed job's pods", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodOnCompletion), Status: status(membership.JobFailed)}, nil},
		{"OnFailure after failure", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodOnFailure), Status: status(membership.JobFailed)}, none},
		{"OnFailure keeps a succeeded job's pods", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodOnFailure), Status: status(membership.JobSucceeded)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, desiredReplicas(tc.rec))
		})
	}
}

func TestConfigMapData(t *testing.T) {
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
	}, configMapData("wd", p))
}
