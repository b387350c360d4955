package printers_test

import (
	"os"
	"time"

	"github.com/elastictraining/coordinator/internal/printers"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// account is a job's goodput account that ended: 584s of training, then
// 9.1s restarting, 5.2s hung and 1.8s trained again.
func account(since time.Time) *membership.Goodput {
	g := membership.NewGoodput(since, membership.CauseTraining)
	at := since
	for _, span := range []struct {
		s    float64
		next membership.Cause
	}{{584, membership.CauseRestarting}, {9.1, membership.CauseHung}, {5.2, membership.CauseRedone}, {1.8, ""}} {
		at = at.Add(time.Duration(span.s * float64(time.Second)))
		g.Accrue(at)
		g.Now = span.next
	}
	return g
}

// The list of jobs as `coordinator jobs` prints it: a job's name with its
// id, ready nodes only while it runs, its goodput, and ages as kubectl
// writes them.
func ExampleWriteJobsTable() {
	created := time.Date(2025, 1, 2, 10, 0, 0, 0, time.UTC)
	jobs := []jobclient.JobSummary{
		{ID: "resnet-50-167051", Spec: &membership.Spec{Name: "Resnet_50", CreatedAt: created},
			Status: membership.Status{Phase: membership.JobRunning, Generation: 3, NP: membership.NP{Min: 2, Max: 4}, Members: 3, Ready: 2,
				Goodput: account(created)}, Nodes: 3},
		{ID: "bert", Status: membership.Status{Phase: membership.JobWaiting}, Nodes: 1},
	}
	printers.WriteJobsTable(os.Stdout, jobs, created.Add(90*time.Minute))
	// Output:
	// JOB                           PHASE    GENERATION  NP   READY  NODES  RESTARTS  GOODPUT  AGE
	// Resnet_50 (resnet-50-167051)  Running  3           2:4  2/3    3      0         97.3%    1h
	// bert                          Waiting  0           -    -      1      0         -        -
}

// A job as `coordinator status` prints it, then as `status -o json`
// prints it for scripts: np as numbers, durations in seconds, its goodput
// with the seconds lost by cause.
func ExampleWriteStatusTable() {
	st := membership.Status{Phase: membership.JobRunning, Generation: 2, NP: membership.NP{Min: 2, Max: 2}, Members: 2, Ready: 2, WorldSize: 2,
		Restarts: 1, Steps: &membership.Steps{Detect: membership.Duration(time.Second), Total: membership.Duration(1500 * time.Millisecond)},
		Goodput: account(time.Date(2025, 1, 2, 10, 0, 0, 0, time.UTC))}
	v := printers.NewStatus("default", st)
	rank := 0
	v.Nodes = []printers.Node{{Node: "n0", Role: "worker", Rank: &rank, Host: "10.0.0.1", State: "running", Generation: 2, PIDs: []int{4242}},
		{Node: "n1", Role: "worker", Host: "10.0.0.2", State: "running", Generation: 2}}
	printers.WriteStatusTable(os.Stdout, v)
	_ = printers.WriteJSON(os.Stdout, v)
	// Output:
	// JOB      PHASE    GENERATION  NP  NODES  READY  WORLD SIZE  RESTARTS  LAST RESTART  MESSAGE
	// default  Running  2           2   2      2      2           1         1.5s          -
	//
	// Goodput: 97.3% of 10m0s (lost restarting 9.1s, hung 5.2s, redone 1.8s)
	//
	// NODE  ROLE    RANK     HOST      STATE    GENERATION  EXIT CODE  PIDS
	// n0    worker  0        10.0.0.1  running  2           0          4242
	// n1    worker  standby  10.0.0.2  running  2           0          -
	// {"job":"default","phase":"Running","generation":2,"np":{"min":2,"max":2},"members":2,"ready":2,"worldSize":2,"restarts":1,"exitCode":0,"message":"","lastRestart":{"detect":1,"stop":0,"wait":0,"start":0,"total":1.5},"goodput":{"ratio":0.9732,"wallSeconds":600.1,"trainingSeconds":584,"lostSeconds":{"starting":0,"restarting":9.1,"waiting":0,"hung":5.2,"redone":1.8,"suspended":0},"lastHour":{"ratio":0.9732,"wallSeconds":600.1,"trainingSeconds":584,"lostSeconds":{"starting":0,"restarting":9.1,"waiting":0,"hung":5.2,"redone":1.8,"suspended":0}}},"updatedAt":"0001-01-01T00:00:00Z","nodes":[{"node":"n0","role":"worker","rank":0,"host":"10.0.0.1","state":"running","generation":2,"exitCode":0,"pids":[4242]},{"node":"n1","role":"worker","rank":null,"host":"10.0.0.2","state":"running","generation":2,"exitCode":0}]}
}
