package membership

// JobRecords are the records of a job that followers of the jobs' keys
// (the Kubernetes bridge, the job controller) keep: each decoded, or nil
// when it is missing or malformed.
type JobRecords struct {
	Spec   *Spec
	Plan   *Plan
	Status *Status
	Bridge *BridgeStatus
	// Autoscaler is the autoscaler's report.
	Autoscaler *AutoscalerStatus
	// SpecCreated is the revision the spec was created at, 0 when there is
	// none: it orders jobs by age.
	SpecCreated int64
}

// Apply records a change of one of the job's keys; other kinds of key are
// ignored.
func (j *JobRecords) Apply(kind KeyKind, kv KeyValue) {
	switch kind {
	case KindSpec:
		j.Spec = decoded(kv, DecodeSpec)
		j.SpecCreated = 0
		if !kv.Deleted {
			j.SpecCreated = kv.CreateRevision
		}
	case KindPlan:
		j.Plan = decoded(kv, DecodePlan)
	case KindStatus:
		j.Status = decoded(kv, DecodeStatus)
	case KindBridge:
		j.Bridge = decoded(kv, DecodeBridgeStatus)
	case KindAutoscaler:
		j.Autoscaler = decoded(kv, DecodeAutoscalerStatus)
	}
}

// decoded is the record a key holds, or nil if it was deleted or cannot be
// read.
func decoded[T any](kv KeyValue, decode func([]byte) (T, error)) *T {
	if kv.Deleted {
		return nil
	}
	v, err := decode(kv.Value)
	if err != nil {
		return nil
	}
	return &v
}
