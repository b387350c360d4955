// Package embedetcd runs a real etcd server inside the process: the store
// behind `coordinator run` and `coordinator etcd`, and behind the tests. A
// server is a single member, or one member of a cluster when given the
// cluster's other members.
package embedetcd
