// Package etcdcluster runs an etcd cluster of several members, each a
// `coordinator etcd` process, for fault tests and the chaos suite: a member
// can be killed, restarted on its data, and the lead moved between members.
package etcdcluster
