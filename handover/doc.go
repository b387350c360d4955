// Package handover lets a sidecar started again take its node back at once.
//
// A sidecar keeps what its successor on the same machine needs in a small
// state file (State: its own process, its lease, its guard's process,
// marker and cgroup), written atomically whenever one of them changes, and
// holds a lock on it for as long as it lives. A sidecar that starts for the
// same job and node reads its predecessor's file before it registers
// (Store.Previous). If the predecessor still runs, it refuses to start: two
// sidecars must never run one node. Otherwise it kills whatever the
// predecessor's guard left, confirms that none of it can run any more, and
// only then revokes the predecessor's lease (TakeBack), instead of waiting
// for the lease to expire: the node's record goes at once, and a takeover
// record tells the coordinator that the lease's processes are dead.
//
// A file it cannot trust (another etcd, job or node, another boot, a pid
// namespace whose processes it cannot see, bad contents) is ignored: the
// node then waits for the old lease to expire, as without the file.
package handover
