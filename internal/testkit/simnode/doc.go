// Package simnode runs simulated training nodes for tests and benchmarks: a
// real sidecar agent on a real etcd, supervising an in-memory workload in
// place of training processes, so that hundreds of nodes fit in one test.
package simnode
