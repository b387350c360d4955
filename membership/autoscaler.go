package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// AutoscalerStatus is the autoscaler's report on a job, at Keys.Autoscaler:
// the size it gave the job, why, and what holds back a growth.
type AutoscalerStatus struct {
	// Target is the number of workers the autoscaler last set.
	Target int `json:"target"`
	// Desired is the size its last pass decided: Target once the
	// decision is carried out.
	Desired int `json:"desired"`
	// Reason is why Target was last changed.
	Reason string `json:"reason,omitempty"`
	// HeldBack says why Desired waits (the cooldown, a gain too small).
	HeldBack  string    `json:"heldBack,omitempty"`
	ChangedAt time.Time `json:"changedAt,omitzero"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// DecodeAutoscalerStatus reads an autoscaler status record.
func DecodeAutoscalerStatus(data []byte) (AutoscalerStatus, error) {
	var a AutoscalerStatus
	if err := json.Unmarshal(data, &a); err != nil {
		return AutoscalerStatus{}, fmt.Errorf("%w: autoscaler: %v", ErrInvalidRecord, err)
	}
	if a.Target < 0 || a.Desired < 0 {
		return AutoscalerStatus{}, fmt.Errorf("%w: autoscaler: negative size", ErrInvalidRecord)
	}
	return a, nil
}

// ErrTargetMoot is returned by SetTarget when the spec is not the one the
// decision was made on: its np changed, or a resource owns it.
var ErrTargetMoot = errors.New("membership: the spec changed; target not set")

// SetTarget sets a job's Target, provided its np is still np and no
// resource owns it, in one transaction with the conditions in also (a
// leader's fence, say). Someone who sets np meanwhile wins: the autoscaler
// decides again from what they set. A stored spec that is malformed is
// replaced by the last good one with the target, as UpdateSpec does.
func SetTarget(ctx context.Context, cli *clientv3.Client, keys Keys, job string, np NP, target int, also ...clientv3.Cmp) (SpecWrite, error) {
	key := keys.Spec(job)
	base, err := readSpecBase(ctx, cli, keys, job)
	if err != nil {
		return SpecWrite{}, err
	}
	s := base.spec
	if base.rev == 0 || s.NP != np || s.Owner != "" {
		return SpecWrite{}, ErrTargetMoot
	}
	s.Target = target
	if err := s.Validate(); err != nil {
		return SpecWrite{}, err
	}
	val, err := Encode(s)
	if err != nil {
		return SpecWrite{}, err
	}
	conds := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", base.rev)}, also...)
	txn, err := cli.Txn(ctx).If(conds...).Then(clientv3.OpPut(key, val)).Commit()
	if err != nil {
		return SpecWrite{}, fmt.Errorf("write spec: %w", err)
	}
	if !txn.Succeeded {
		return SpecWrite{}, ErrTargetMoot
	}
	return SpecWrite{Spec: s, Before: &base.spec, Repaired: base.malformed}, nil
}
