// Package jobclient is the API the command line, the benchmarks and other
// programs use to read and change jobs: scale, status, nodes, events, the
// Kubernetes reports, the list of jobs, cancel and delete. It reads and
// writes etcd through the membership schema and needs no leadership, so it
// runs anywhere; the leader's own loop is package coordinator.
package jobclient
