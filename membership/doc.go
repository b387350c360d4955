// Package membership owns the v1 etcd key schema of elastic training jobs and
// the records stored under it, and gives nodes their presence in etcd: a node
// record under a lease that is kept alive through transient errors and etcd
// restarts, and watches that always deliver the complete current state of a
// key range.
//
// Every other package reads and writes etcd through the keys and record
// types defined here, so the schema has exactly one owner.
package membership
