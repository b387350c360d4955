package membership

import (
	"fmt"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// LiveNode is a node record as it stands in etcd.
type LiveNode struct {
	Node
	// JoinRevision is the revision that created the record: the join order.
	JoinRevision int64
	// ModRevision is the revision of the record's last change: the order in
	// which nodes reported.
	ModRevision int64
	Lease       clientv3.LeaseID
}

// InvalidRecord is a key whose value could not be decoded.
type InvalidRecord struct {
	Key string
	Err error
}

// DecodeLiveNode decodes a node key's value and checks that the record names
// the node of its key.
func DecodeLiveNode(kv KeyValue, id string) (LiveNode, error) {
	n, err := DecodeNode(kv.Value)
	if err != nil {
		return LiveNode{}, err
	}
	if n.ID != id {
		return LiveNode{}, &mismatchError{key: kv.Key, id: n.ID}
	}
	if kv.Lease == 0 {
		// A node is present only while its sidecar renews its lease;
		// without one the record would outlive the node.
		return LiveNode{}, fmt.Errorf("%w: node record at %s has no lease", ErrInvalidRecord, kv.Key)
	}
	return LiveNode{Node: n, JoinRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Lease: kv.Lease}, nil
}

type mismatchError struct{ key, id string }

func (e *mismatchError) Error() string {
	return "membership: invalid record: node record at " + e.key + " names node " + e.id
}

func (e *mismatchError) Unwrap() error { return ErrInvalidRecord }

// SortByJoin orders nodes by join revision, then id, so that every reader
// sees the same order.
func SortByJoin(nodes []LiveNode) {
	sort.Slice(nodes, func(i, j int) bool {
		if nodes[i].JoinRevision != nodes[j].JoinRevision {
			return nodes[i].JoinRevision < nodes[j].JoinRevision
		}
		return nodes[i].ID < nodes[j].ID
	})
}
