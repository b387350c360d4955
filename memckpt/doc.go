// Package memckpt keeps a job's checkpoints in the memory of its sidecars,
// so that a restarted trainer loads the newest state in milliseconds
// instead of reading a file written a checkpoint interval ago.
//
// A trainer calls save in the Python package elastic (python/elastic, written beside the
// sidecar and put on the trainer's PYTHONPATH): the state's tensors are
// copied into a buffer and sent, in the background, to the node's sidecar
// over an abstract unix socket (ELASTIC_CHECKPOINT_SOCKET). The sidecar
// serves only processes below itself, of its own user (SO_PEERCRED), and
// stores a save only if the process's generation is the one the node runs
// under a lease it still holds (Fence): a process of a generation that is
// over stores nothing.
//
// The store is bounded: at most Config.Copies copies and Config.Memory
// bytes, own copies and replicas together; one copy may take at most half
// the memory, so that the newest complete copy stays while the next one
// arrives, and a larger state is refused with an error that says how to
// raise the bound. A copy is complete or absent: it enters the store only
// once all of it has arrived and its checksum matches.
//
// After a save is stored, the newest copy is pushed, one push in flight and
// the newest waiting, to the next node in the plan's rank order, whose
// sidecar keeps it as a replica. A node with no copy asks the other live
// sidecars of the job for theirs. Sidecars talk over TLS with ephemeral
// certificates, and each side proves that it holds the job's secret (a
// random value under the job's etcd prefix, readable only with the job's
// credentials) by an HMAC over the TLS session's exported keying material:
// a peer of another job, or one without the secret, is refused, and a
// proof cannot be replayed on another connection. A connection has
// Config.HandshakeTimeout to prove the secret, and at most
// Config.MaxUnauthenticated are held before they have, shared between the
// addresses they come from; refusals are said once per address and
// Config.RefusedLogInterval, with their count.
//
// A save that names a path is also written there, atomically, at a slower
// interval and when the node leaves, only while the node holds its lease.
// The file is a small header (job, the job's life, generation, sequence,
// size, CRC-32) and the payload; load compares it with what the sidecars
// hold, and takes a file of another life of the job only when they hold
// nothing.
package memckpt
