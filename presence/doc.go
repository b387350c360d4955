// Package presence gives a participant its presence in etcd and follows
// others'. A node registers its record under a lease that is kept alive
// through transient errors and etcd restarts, and that fences the node at a
// deadline armed on its own clock before the lease can expire (Register);
// an evicter revokes another node's lease and leaves a record that outlives
// the node's deadline (Evict); a node's next sidecar, having killed what its
// predecessor left, revokes the predecessor's lease and records that its
// processes are dead (TakeOver). Watches deliver the complete current state of
// a key range (Follow), of a job's nodes (WatchNodes) and of its plan
// (WatchPlan); a leader's fenced term travels in a context (WithLeaderFence).
//
// The keys and records are package membership's: presence is the runtime on
// that schema, as etcd keeps its concurrency package apart from its client.
package presence
