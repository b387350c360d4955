// Command chaos runs a training job through a seeded schedule of faults,
// with real processes throughout, and checks the coordinator's promises
// after every run: three etcd members, coordinator replicas, and more
// sidecars than the job needs, each reaching etcd through proxies of its own
// that can be cut. The workers (worker.sh) log their starts, heartbeats and
// checkpoints, and report their progress to the sidecars' hang watch; the
// invariants are checked on that log, on the job's status and events and
// on the processes left after the teardown. Among the faults are hung
// trainers (stopped, or asleep forever) and stragglers: a hang must end
// within the hang timeout and a restart, and nothing else may restart the
// job for a hang (hangs.go). The same seed gives the same schedule; a
// failing seed prints the command that runs it again.
//
//	go run ./integration/chaos -seeds 1-20 -seconds 120
package main
