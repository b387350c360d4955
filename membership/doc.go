// Package membership owns the v1 etcd key schema of elastic training jobs:
// the keys, the records stored under them (node, spec, plan and rank table,
// status, events, evictions, the Kubernetes reports), their codecs, and the
// few reads and writes that keep a record whole (a spec's update, a table's
// chunks).
//
// Every other package reads and writes etcd through the keys and record
// types defined here, so the schema has exactly one owner. What lives on
// the schema, a node's presence under a lease and the watches that follow
// it, is package presence.
package membership
