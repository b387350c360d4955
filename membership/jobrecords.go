package membership

// JobRecords are the records of a job that followers of the jobs' keys
// (the Kubernetes bridge, the job controller) keep: each decoded, nil
// when it is missing. A malformed value is not taken: the last good one
// stands, as it does for the coordinator; for a spec never read good, the
// one the status says the job runs under (Status.Spec).
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
	// specMalformed: the spec key holds a value that does not decode.
	specMalformed bool
}

// Apply records a change of one of the job's keys; other kinds of key are
// ignored. The plan's rank table is attached once its chunks are in.
func (j *JobRecords) Apply(jk JobKey, kv KeyValue) {
	switch jk.Kind {
	case KindSpec:
		j.Spec = decoded(j.Spec, kv, DecodeSpec)
		j.SpecCreated, j.specMalformed = 0, false
		if !kv.Deleted {
			j.SpecCreated = kv.CreateRevision
			_, err := DecodeSpec(kv.Value)
			j.specMalformed = err != nil
		}
		j.specFromStatus()
	case KindPlan:
		j.Plan = decoded(j.Plan, kv, DecodePlan)
		j.resolvePlan()
	case KindTable:
		j.tables.Apply(jk, kv)
		j.resolvePlan()
	case KindStatus:
		j.Status = decoded(j.Status, kv, DecodeStatus)
		j.specFromStatus()
	case KindBridge:
		j.Bridge = decoded(j.Bridge, kv, DecodeBridgeStatus)
	case KindAutoscaler:
		j.Autoscaler = decoded(j.Autoscaler, kv, DecodeAutoscalerStatus)
	}
}

// specFromStatus takes the spec the status says the job runs under, for a
// spec that is malformed and was never read good here (a follower that
// started after the bad write).
func (j *JobRecords) specFromStatus() {
	if j.Spec == nil && j.specMalformed && j.Status != nil && j.Status.Spec != nil {
		s := *j.Status.Spec
		j.Spec = &s
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
