package membership

import (
	"encoding/json"
	"fmt"
	"time"
)

// BridgeStatus is the Kubernetes bridge's report on a job, at Keys.Bridge:
// what it scaled, and the problem it cannot fix, if any.
type BridgeStatus struct {
	// Workload is kind/name of the job's worker workload.
	Workload string `json:"workload,omitempty"`
	// Replicas is the replica count the bridge last set.
	Replicas int `json:"replicas"`
	// Problem says what keeps the bridge from following the job, e.g. no
	// workload with the job's labels or RBAC denying the scale subresource.
	Problem   string    `json:"problem,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// DecodeBridgeStatus reads a bridge status record.
func DecodeBridgeStatus(data []byte) (BridgeStatus, error) {
	var b BridgeStatus
	if err := json.Unmarshal(data, &b); err != nil {
		return BridgeStatus{}, fmt.Errorf("%w: bridge: %v", ErrInvalidRecord, err)
	}
	if b.Replicas < 0 {
		return BridgeStatus{}, fmt.Errorf("%w: bridge: negative replicas", ErrInvalidRecord)
	}
	return b, nil
}
