// Command scale measures how the coordinator absorbs membership changes in
// jobs of thousands of nodes, to the moment every node runs: real
// `coordinator etcd` (fsync on) and `coordinator serve` processes, and N
// sidecar agents (the real sidecar.Agent, with a workload that only counts
// its starts) in a few agent processes that share the machine with them.
//
// For each size it starts N+1 nodes for a job of np N (one standby), then
// measures: join (every node started at once) → all N running; three times,
// one member lost (its sidecar gone, its lease revoked, as the Kubernetes
// bridge does for a failed pod) → all N running again, the standby in its
// place; one `coordinator scale` to N+1 → all N+1 running. Around each
// change it reads the coordinator's CPU time, etcd's bytes sent to clients,
// written to its WAL, its database size and the evictions.
//
//	go run ./bench/scale -coordinator bin/coordinator -sizes 1000,2000,5000,10000
package main
