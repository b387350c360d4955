package membership

// JobRecords are the records of a job that followers of the jobs' keys
// (the Kubernetes bridge, the job controller) keep: each decoded, nil
// when it is missing. A malformed value is not taken: the last good one
// stands (nil if there was none), as it does for the coordinator.
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

	tables StoredTables
}

// Apply records a change of one of the job's keys; other kinds of key are
// ignored. The plan's rank table is attached once its chunks are in.
func (j *JobRecords) Apply(jk JobKey, kv KeyValue) {
	switch jk.Kind {
	case KindSpec:
		j.Spec = decoded(j.Spec, kv, DecodeSpec)
		j.SpecCreated = 0
		if !kv.Deleted {
			j.SpecCreated = kv.CreateRevision
		}
	case KindPlan:
		j.Plan = decoded(j.Plan, kv, DecodePlan)
		j.resolvePlan()
	case KindTable:
		j.tables.Apply(jk, kv)
		j.resolvePlan()
	case KindStatus:
		j.Status = decoded(j.Status, kv, DecodeStatus)
	case KindBridge:
		j.Bridge = decoded(j.Bridge, kv, DecodeBridgeStatus)
	case KindAutoscaler:
		j.Autoscaler = decoded(j.Autoscaler, kv, DecodeAutoscalerStatus)
	}
}

// resolvePlan attaches the plan's table when its chunks are all there.
func (j *JobRecords) resolvePlan() {
	if j.Plan == nil || !j.Plan.Unresolved() {
		return
	}
	snapshot, err := j.tables.Snapshot(*j.Plan.Table)
	if err != nil {
		return // not all there yet
	}
	if t, err := DecodeTableSnapshot(snapshot, j.Plan.Table.Digest); err == nil {
		p := *j.Plan
		p.AttachTable(t)
		j.Plan = &p
	}
}

// decoded is the record a key holds now: nil if it was deleted, the last
// good one (last) if the new value cannot be read.
func decoded[T any](last *T, kv KeyValue, decode func([]byte) (T, error)) *T {
	if kv.Deleted {
		return nil
	}
	v, err := decode(kv.Value)
	if err != nil {
		return last
	}
	return &v
}
