// Package launcher supervises a node's training processes through a process
// guard (package guard): it starts one process per local rank with the
// environment its caller gives that rank, stops them with SIGTERM, a grace
// period and SIGKILL, and hands the guard the lease deadline past which the
// guard kills them on its own. A stop returns only once nothing of the
// processes' trees is left. With a Watch in a start's Procs, it hands on
// what the guard finds of the ranks' progress, and the ranks it finds hung
// (Config.OnHung, Config.OnProgress); StopStacks then stops with each
// rank's Python stack written first.
//
// It knows nothing of etcd, Kubernetes or the frameworks' variables
// (package trainerenv builds those).
package launcher
