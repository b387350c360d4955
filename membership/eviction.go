package membership

import (
	"encoding/json"
	"fmt"
	"time"
)

// Eviction records that a node's lease was revoked by someone else than the
// node: the coordinator after a stop timeout, or the Kubernetes bridge for a
// pod that is gone. The node may not know yet: its processes run until its
// own fence deadline, which is at most its lease's TTL after the
// revocation. So the record, at Keys.Eviction (by node and lease), lives under a lease of its
// own that outlasts that deadline, and while it exists the coordinator
// counts the node's processes as running, until a TTL after it saw the
// lease gone (etcd stretches the record's lease when its leader changes).
type Eviction struct {
	Node string `json:"node"`
	// Lease is the node's lease that was revoked; TTLSeconds its TTL.
	Lease      int64     `json:"lease"`
	TTLSeconds int64     `json:"ttlSeconds"`
	By         string    `json:"by"`
	Reason     string    `json:"reason"`
	At         time.Time `json:"at"`
}

// DecodeEviction reads an eviction record.
func DecodeEviction(data []byte) (Eviction, error) {
	var e Eviction
	if err := json.Unmarshal(data, &e); err != nil {
		return Eviction{}, fmt.Errorf("%w: eviction: %v", ErrInvalidRecord, err)
	}
	if err := ValidateNodeID(e.Node); err != nil {
		return Eviction{}, fmt.Errorf("%w: eviction: %v", ErrInvalidRecord, err)
	}
	if e.Lease == 0 || e.TTLSeconds < 1 {
		return Eviction{}, fmt.Errorf("%w: eviction of %s: no lease or ttl", ErrInvalidRecord, e.Node)
	}
	return e, nil
}
