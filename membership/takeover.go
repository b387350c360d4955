package membership

import (
	"encoding/json"
	"fmt"
	"time"
)

// Takeover records that a node's lease was revoked by the node's own next
// sidecar, on the same machine, after it had killed every process its
// predecessor's guard ran and found none left. Unlike an eviction, it says
// that the lease's processes are dead now: the coordinator need not wait out
// the evicted node's deadline for them. It is written before the revocation,
// at Keys.Takeover (by node and lease), under a lease of its own that
// outlives any eviction record of the same lease, and is never written by
// anyone who has not seen the processes gone.
type Takeover struct {
	Node string `json:"node"`
	// Lease is the predecessor's lease that was revoked.
	Lease int64 `json:"lease"`
	// Pid is the process id of the sidecar that took the node back, for
	// the reader.
	Pid int       `json:"pid,omitempty"`
	At  time.Time `json:"at"`
}

// DecodeTakeover reads a takeover record.
func DecodeTakeover(data []byte) (Takeover, error) {
	var t Takeover
	if err := json.Unmarshal(data, &t); err != nil {
		return Takeover{}, fmt.Errorf("%w: takeover: %v", ErrInvalidRecord, err)
	}
	if err := ValidateNodeID(t.Node); err != nil {
		return Takeover{}, fmt.Errorf("%w: takeover: %v", ErrInvalidRecord, err)
	}
	if t.Lease <= 0 {
		return Takeover{}, fmt.Errorf("%w: takeover of %s: no lease", ErrInvalidRecord, t.Node)
	}
	return t, nil
}
