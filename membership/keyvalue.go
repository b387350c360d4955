package membership

import clientv3 "go.etcd.io/etcd/client/v3"

// KeyValue is one key as read from etcd or reported by a watch (presence.Follow).
type KeyValue struct {
	Key   string
	Value []byte
	// CreateRevision orders keys by when they were created: the join order
	// of nodes.
	CreateRevision int64
	ModRevision    int64
	Lease          clientv3.LeaseID
	// Deleted is set on a change that removed the key.
	Deleted bool
}
