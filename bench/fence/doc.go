// Command fence measures how a node that can no longer act is fenced: from
// SIGSTOP of its sidecar, and from cutting its network to etcd, to its
// trainer being dead, against the moment etcd expires the node's lease and
// the moment the next generation's first trainer starts. Both gaps must be
// positive every time; any sign of life of a generation after the next one
// started is counted as an overlap.
//
// Everything is a real process: a `coordinator etcd`, a `coordinator
// serve`, and sidecars that reach etcd each through a proxy of its own,
// running testdata/fencetrainer.sh, which logs its start and a heartbeat
// every 10 ms. The trainer's death is seen through a pidfd; the lease's
// expiry through a watch on the node's record, so it is seen slightly after
// etcd decided it.
//
//	go run ./bench/fence -coordinator bin/coordinator -runs 20
package main
