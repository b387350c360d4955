// Package admission is the job controller's side of Kueue's contract with
// an external job kind (integrations.externalFrameworks): the Workload a
// queued job asks for — a pod set per role, the workers' counted from np's
// maximum down to its minimum (partial admission) — and what the state of
// that Workload makes of the job: wait suspended, run at the admitted
// count on the admitted flavors, or stop and give the quota back.
//
// Kueue creates no Workload for an external kind and reconciles none: the
// job's controller does what Kueue's jobframework does for its built-in
// kinds (pkg/controller/jobframework/reconciler.go at the version go.mod
// pins). This package holds that contract as pure functions over Kueue's
// published API types; the job controller does the reads and writes.
package admission
