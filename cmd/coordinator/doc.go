// Command coordinator is the elastic-training coordinator: the sidecar of
// every training node, the leader-elected daemon, the local all-in-one run,
// and the tools to scale and watch jobs. See `coordinator --help`.
package main
