package membership

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Fault tolerance levels of a job.
const (
	// FaultToleranceNone fails the job on the first failed child or on the
	// loss of a running member.
	FaultToleranceNone = 0
	// FaultToleranceRestart restarts the generation with the same members
	// when a child fails, while the restart budget lasts, and waits for a
	// replacement when a member is lost.
	FaultToleranceRestart = 1
	// FaultToleranceReplace is FaultToleranceRestart that also moves a node
	// whose child failed to standby when another node can take its place.
	FaultToleranceReplace = 2
)

// SuccessPolicy says when a job has succeeded.
type SuccessPolicy string

// Success policies.
const (
	// SuccessAllWorkers: every worker member exited 0.
	SuccessAllWorkers SuccessPolicy = "AllWorkers"
	// SuccessRank0: the rank-0 worker exited 0.
	SuccessRank0 SuccessPolicy = "Rank0"
)

// Validate reports a policy that is none of the above.
func (p SuccessPolicy) Validate() error {
	switch p {
	case SuccessAllWorkers, SuccessRank0:
		return nil
	}
	return fmt.Errorf("successPolicy %q: want %s or %s", string(p), SuccessAllWorkers, SuccessRank0)
}

// CleanPodPolicy says which pods the Kubernetes bridge deletes when a job ends.
type CleanPodPolicy string

// Clean pod policies, as in the PaddleJob and MSJob operators.
const (
	CleanPodAlways       CleanPodPolicy = "Always"
	CleanPodNever        CleanPodPolicy = "Never"
	CleanPodOnFailure    CleanPodPolicy = "OnFailure"
	CleanPodOnCompletion CleanPodPolicy = "OnCompletion"
)

// Validate reports a policy that is none of the above.
func (p CleanPodPolicy) Validate() error {
	switch p {
	case CleanPodAlways, CleanPodNever, CleanPodOnFailure, CleanPodOnCompletion:
		return nil
	}
	return fmt.Errorf("cleanPodPolicy %q: want Always, Never, OnFailure or OnCompletion", string(p))
}

// DefaultMaxRestarts is the restart budget of a job whose spec sets none.
const DefaultMaxRestarts = 3

// ErrInvalidRecord is wrapped by every error about a record read from etcd.
var ErrInvalidRecord = errors.New("membership: invalid record")

// Spec is a job's desired shape, stored at Keys.Spec. It is written by
// `scale` and, create-only, by the first sidecar of a job.
type Spec struct {
	// NP is the target number of worker nodes: a range is the bounds an
	// autoscaler moves Target within.
	NP NP `json:"np"`
	// Target, when not 0, is the number of workers an autoscaler chose
	// within NP (or a resource's replicas between its bounds): the job runs
	// as if np were NP.Min:Target. Setting np by hand clears it.
	Target int `json:"target,omitempty"`
	// Spares is how many worker nodes beyond the target the job keeps
	// registered and warm, holding no rank: when a member is lost, the
	// next generation takes a spare at once instead of waiting for the
	// lost node to come back. `run` and the Kubernetes bridge start them;
	// the coordinator ranks them last.
	Spares int `json:"spares,omitempty"`
	// PS is the exact number of parameter-server nodes.
	PS int `json:"ps"`
	// Schedulers is the number of scheduler nodes (MindSpore), 0 or 1.
	Schedulers int `json:"schedulers"`
	// Heter is the exact number of heterogeneous trainer nodes
	// (PaddlePaddle's heter parameter-server mode).
	Heter int `json:"heter,omitempty"`
	// FaultTolerance is one of the FaultTolerance* levels.
	FaultTolerance int `json:"faultTolerance"`
	// MaxRestarts is the job-wide budget of restarts caused by failed
	// children; membership changes never spend it.
	MaxRestarts int `json:"maxRestarts"`
	// SuccessPolicy defaults to SuccessAllWorkers.
	SuccessPolicy SuccessPolicy `json:"successPolicy"`
	// CleanPodPolicy is read by the Kubernetes bridge; defaults to
	// CleanPodNever.
	CleanPodPolicy CleanPodPolicy `json:"cleanPodPolicy"`
	// RetryableExitCodes, when set, are the only exit codes of a failed
	// child that a restart may answer; any other ends the job (MSJob's
	// restartPolicy ExitCode).
	RetryableExitCodes []int `json:"retryableExitCodes,omitempty"`
	// Priority ranks the job among elastic jobs of the same Kubernetes
	// priority for the autoscaler: a higher one grows first and shrinks
	// last (an ElasticJob's spec.priority).
	Priority int `json:"priority,omitempty"`
	// Owner, when set, is the Kubernetes resource the spec is written
	// from (Kind/namespace/name/uid): a change made elsewhere is undone.
	Owner string `json:"owner,omitempty"`
	// Name is the job's name as the user gave it, when it is not a
	// DNS-1123 label and the job's id was derived from it (JobIDFor).
	Name string `json:"name,omitempty"`
	// CreatedAt is when the spec was first stored, for a job's age.
	CreatedAt time.Time `json:"createdAt,omitzero"`
	// HangTimeout, when set, is how long a rank may make no progress
	// before its generation is restarted; 0 turns watching off. Unset, each
	// sidecar learns it from the job's own step intervals (see HangWatch).
	HangTimeout *Duration `json:"hangTimeout,omitempty"`
	// StartupTimeout, when set, is how long a generation's first step may
	// take (start-up, compilation, data loading) before its ranks count as
	// hung; 0 turns that off. Unset, the default applies.
	StartupTimeout *Duration `json:"startupTimeout,omitempty"`
	// MaxHangRestarts is the job-wide budget of restarts caused by a rank
	// that hung, separate from MaxRestarts.
	MaxHangRestarts int `json:"maxHangRestarts"`
	// Cancel, when set, asks the coordinator to end the job now, failed,
	// with this reason (`coordinator delete --force`).
	Cancel string `json:"cancel,omitempty"`
	// Suspend, when set, asks the coordinator to stop the job's generation
	// gracefully and start none until it is cleared: the trainers get
	// their stop signal and the job holds no ranks (phase Suspended). A
	// Kubernetes job's pods then go, writing their checkpoints to the
	// job's path as they leave; cleared, the job starts afresh from them.
	Suspend bool `json:"suspend,omitempty"`
	// Queue, when set, is the Kueue LocalQueue that admits the job: Kueue
	// sets its size (np is what it admitted) and the autoscaler leaves it.
	Queue string `json:"queue,omitempty"`
}

// DefaultSpec is the spec of a job for which only np is known.
func DefaultSpec(np NP) Spec {
	return Spec{
		NP:              np,
		FaultTolerance:  FaultToleranceRestart,
		MaxRestarts:     DefaultMaxRestarts,
		MaxHangRestarts: DefaultMaxHangRestarts,
		SuccessPolicy:   SuccessAllWorkers,
		CleanPodPolicy:  CleanPodNever,
	}
}

// Validate reports the first field of s that is out of range.
func (s Spec) Validate() error {
	if err := s.NP.Validate(); err != nil {
		return err
	}
	switch {
	case s.Spares < 0:
		return fmt.Errorf("spares %d: must not be negative", s.Spares)
	case s.Spares > s.NP.Max:
		return fmt.Errorf("spares %d: at most the workers' maximum, %d", s.Spares, s.NP.Max)
	case s.PS < 0 || s.PS > MaxNP:
		return fmt.Errorf("ps %d: want 0..%d", s.PS, MaxNP)
	case s.Schedulers < 0 || s.Schedulers > 1:
		return fmt.Errorf("schedulers %d: want 0 or 1", s.Schedulers)
	case s.Heter < 0 || s.Heter > MaxNP:
		return fmt.Errorf("heter %d: want 0..%d", s.Heter, MaxNP)
	case s.FaultTolerance < FaultToleranceNone || s.FaultTolerance > FaultToleranceReplace:
		return fmt.Errorf("faultTolerance %d: want 0, 1 or 2", s.FaultTolerance)
	case s.MaxRestarts < 0:
		return fmt.Errorf("maxRestarts %d: must not be negative", s.MaxRestarts)
	case s.MaxHangRestarts < 0:
		return fmt.Errorf("maxHangRestarts %d: must not be negative", s.MaxHangRestarts)
	case s.HangTimeout != nil && *s.HangTimeout < 0:
		return fmt.Errorf("hangTimeout %s: must not be negative (0 turns hang watching off)", *s.HangTimeout)
	case s.StartupTimeout != nil && *s.StartupTimeout < 0:
		return fmt.Errorf("startupTimeout %s: must not be negative (0 turns the start-up budget off)", *s.StartupTimeout)
	case s.Target != 0 && (s.Target < s.NP.Min || s.Target > s.NP.Max):
		return fmt.Errorf("target %d: want 0 (none) or within np %s", s.Target, s.NP)
	case len(s.Name) > MaxJobNameLength:
		return fmt.Errorf("name: longer than %d characters", MaxJobNameLength)
	}
	if err := s.SuccessPolicy.Validate(); err != nil {
		return err
	}
	return s.CleanPodPolicy.Validate()
}

// Workers is the range of workers the job runs with now: np, its maximum
// lowered to Target when one is set.
func (s Spec) Workers() NP {
	if s.Target == 0 {
		return s.NP
	}
	return NP{Min: s.NP.Min, Max: s.Target}
}

// DecodeSpec reads a spec record. Fields the record leaves out take the
// values of DefaultSpec.
func DecodeSpec(data []byte) (Spec, error) {
	s := DefaultSpec(NP{})
	if err := json.Unmarshal(data, &s); err != nil {
		return Spec{}, fmt.Errorf("%w: spec: %v", ErrInvalidRecord, err)
	}
	if s.NP.IsZero() {
		return Spec{}, fmt.Errorf("%w: spec: np is missing", ErrInvalidRecord)
	}
	if err := s.Validate(); err != nil {
		return Spec{}, fmt.Errorf("%w: spec: %v", ErrInvalidRecord, err)
	}
	return s, nil
}

// Encode renders a record as the JSON stored in etcd.
func Encode(record any) (string, error) {
	data, err := json.Marshal(record)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", record, err)
	}
	return string(data), nil
}
