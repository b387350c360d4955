package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group, version and names of the resource.
const (
	Group    = "elastictraining.io"
	Version  = "v1"
	Kind     = "ElasticJob"
	Resource = "elasticjobs"
)

// Resource is the ElasticJob resource.
var GroupVersionResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// ElasticJob is a training job.
type ElasticJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ElasticJobSpec   `json:"spec"`
	Status            ElasticJobStatus `json:"status,omitempty"`
}

// ElasticJobSpec is what the user asks for.
type ElasticJobSpec struct {
	// Worker runs the trainers. Its replicas are the job's np, and what
	// `kubectl scale` and an HPA change.
	Worker *RoleSpec `json:"worker"`
	// PS are parameter servers (PaddlePaddle, MindSpore).
	PS *RoleSpec `json:"ps,omitempty"`
	// Scheduler is MindSpore's scheduler: at most one.
	Scheduler *RoleSpec `json:"scheduler,omitempty"`
	// Heter are PaddlePaddle's heterogeneous parameter-server trainers.
	Heter *RoleSpec `json:"heter,omitempty"`

	// FaultTolerance: 0 a failure ends the job, 1 restart, 2 restart and
	// replace the failing node.
	FaultTolerance *int `json:"faultTolerance,omitempty"`
	// MaxRestarts is the budget of restarts that failures may spend.
	MaxRestarts *int `json:"maxRestarts,omitempty"`
	// HangTimeout is how long a rank may make no progress before its
	// generation restarts: a duration ("30s"), 0 (no hang watching), or
	// auto (the default: learned from the job's step intervals, at least
	// 5s). A PaddleJob or MSJob says it in AnnotationHangTimeout.
	HangTimeout string `json:"hangTimeout,omitempty"`
	// StartupTimeout is how long a restarted generation's first step may
	// take: a duration, 0 (no limit) or auto (at least 2m, learned).
	StartupTimeout string `json:"startupTimeout,omitempty"`
	// MaxHangRestarts is the budget of restarts that hung ranks may
	// spend, besides MaxRestarts.
	MaxHangRestarts *int `json:"maxHangRestarts,omitempty"`
	// SuccessPolicy is AllWorkers (the default) or Rank0.
	SuccessPolicy string `json:"successPolicy,omitempty"`
	// CleanPodPolicy is Always, Never (the default), OnFailure or
	// OnCompletion: which pods go when the job ends.
	CleanPodPolicy string `json:"cleanPodPolicy,omitempty"`
	// Intranet is how the nodes reach each other: PodIP (the default),
	// Service (a headless Service per pod) or Host (host network).
	Intranet string `json:"intranet,omitempty"`
	// WithGloo is PaddlePaddle's: 0 off, 1 workers, 2 workers and servers.
	WithGloo *int `json:"withGloo,omitempty"`
	// Priority ranks jobs for the autoscaler: higher keeps its nodes.
	Priority int `json:"priority,omitempty"`
	// Preload are Python modules that a warm interpreter per training
	// process imports ahead of each generation, for a training command
	// whose program is a Python interpreter: the sidecar's --preload
	// (ELASTIC_PRELOAD). A PaddleJob or MSJob says it in the annotation
	// AnnotationPreload.
	Preload []string `json:"preload,omitempty"`
	// InPlace says the training command trains in place (the Python
	// module elastic's run): a pod that holds no rank (a spare, one whose
	// trainer failed) starts it ahead, runs its start-up and keeps it
	// waiting, so that a lost rank goes to a trainer that has started:
	// the sidecar's --in-place (ELASTIC_IN_PLACE). A PaddleJob or MSJob
	// says it in the annotation AnnotationInPlace.
	InPlace bool `json:"inPlace,omitempty"`
	// Suspend, true, stops a running job gracefully and keeps it from
	// running: its trainers get their stop signal, every sidecar writes
	// its newest checkpoint to the job's checkpoint path, and its pods go.
	// Set false again, the job starts again from that state. A job in a
	// Kueue queue (label kueue.x-k8s.io/queue-name) is suspended until
	// Kueue admits it, and whenever Kueue evicts it. A PaddleJob says it
	// in AnnotationSuspend; an MSJob in spec.runPolicy.suspend.
	Suspend *bool `json:"suspend,omitempty"`
	// Framework is whose launcher's variables the training processes
	// get, exactly: pytorch, paddle or mindspore; auto (the default)
	// gives every framework's. A PaddleJob is paddle, an MSJob mindspore.
	Framework string `json:"framework,omitempty"`
}

// RoleSpec is one role's pods.
type RoleSpec struct {
	// Replicas is the number of pods: for workers, the most the job runs on.
	Replicas *int32 `json:"replicas,omitempty"`
	// MinReplicas, for workers only, lets the job run on fewer: any size
	// from MinReplicas to Replicas (np MIN:MAX). Replicas if unset.
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// MaxReplicas, for workers only, makes the job autoscaled: `serve
	// --autoscale` moves Replicas between MinReplicas and MaxReplicas
	// through the scale subresource, as an HPA would.
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`
	// Spares, for workers only, are pods beyond Replicas that register and
	// warm up (spec.preload) but hold no rank: when a worker is lost, the
	// next generation takes a spare at once, and the lost worker's pod,
	// back, is the spare. At most the workers' maximum.
	Spares *int32 `json:"spares,omitempty"`
	// Template is the pods' template. The first container is the training
	// container, unless one is named after the framework (paddle,
	// mindspore, pytorch, trainer).
	Template corev1.PodTemplateSpec `json:"template"`
}

// Phases of a job, as the coordinator reports them.
const (
	PhasePending    = "Pending" // created; no pod has registered yet
	PhaseWaiting    = "Waiting"
	PhaseRestarting = "Restarting"
	PhaseRunning    = "Running"
	PhaseSuspended  = "Suspended" // spec.suspend: no pods, no generation
	PhaseSucceeded  = "Succeeded"
	PhaseFailed     = "Failed"
)

// Condition types on a job.
const (
	// ConditionRunning is true while every member of the current
	// generation runs.
	ConditionRunning = "Running"
	// ConditionKubernetesReady is false while something on the Kubernetes
	// side keeps the job from its shape (RBAC, a name taken, a bad template).
	ConditionKubernetesReady = "KubernetesReady"
	// ConditionFinished is true once the job succeeded or failed.
	ConditionFinished = "Finished"
	// ConditionCreated is true once the controller took the job on.
	ConditionCreated = "Created"
	// ConditionRestarting is true while the job changes generation; its
	// message names the generation and why.
	ConditionRestarting = "Restarting"
	// ConditionAdmitted, on a job of a Kueue queue (label
	// kueue.x-k8s.io/queue-name), is true while its Workload is admitted;
	// false, its reason and message are Kueue's: why it waits.
	ConditionAdmitted = "Admitted"
	// ConditionSuspended is true while the job is suspended and holds no
	// generation; it appears once a job has been suspended.
	ConditionSuspended = "Suspended"
	// ConditionSucceeded and ConditionFailed appear, true, when the job
	// ended so.
	ConditionSucceeded = "Succeeded"
	ConditionFailed    = "Failed"
)

// ReplicaStatus counts one role's pods: those there, and those ready
// (workers: running in the current generation).
type ReplicaStatus struct {
	Replicas int32 `json:"replicas"`
	Ready    int32 `json:"ready"`
}

// ElasticJobStatus is what the coordinator reports.
type ElasticJobStatus struct {
	Phase string `json:"phase,omitempty"`
	// Generation is the job's generation (rank table) now running or being
	// formed, or once the job ended the last that ran; not
	// metadata.generation.
	Generation int64 `json:"generation,omitempty"`
	// NP is the target, N or MIN:MAX.
	NP string `json:"np,omitempty"`
	// Replicas is the number of worker pods; the scale subresource reads it.
	Replicas int32 `json:"replicas"`
	// Spares are the worker pods there beyond Replicas: the job's spares.
	Spares int32 `json:"spares,omitempty"`
	// Selector selects the worker pods, for an HPA.
	Selector string `json:"selector,omitempty"`
	// Ready is the members running (while Running) or live workers (while
	// Waiting).
	Ready int `json:"ready"`
	// WorkersReady are the worker nodes among Ready: what the kinds that
	// count workers alone report (a PaddleJob's worker.running, an MSJob's
	// Worker.active, both their scale subresource's status).
	WorkersReady int `json:"-"`
	// ReplicaStatuses are each role's pods, by role (worker, ps, heter,
	// scheduler).
	ReplicaStatuses map[string]ReplicaStatus `json:"replicaStatuses,omitempty"`
	// WorldSize is the number of training processes.
	WorldSize int `json:"worldSize"`
	// Restarts are the restarts a fault caused: a member that failed, or
	// was lost (its pod deleted or failed, its machine gone).
	Restarts int `json:"restarts"`
	// FailureRestarts are the restarts failures spent of the job's budget
	// (maxRestarts); a lost member spends none.
	FailureRestarts int `json:"failureRestarts,omitempty"`
	// HangRestarts are the restarts hung ranks spent of the job's
	// maxHangRestarts.
	HangRestarts int `json:"hangRestarts,omitempty"`
	// LastRestartSeconds is how long the last change of generation took,
	// from being seen to every member running.
	LastRestartSeconds string `json:"lastRestartSeconds,omitempty"`
	// Goodput is the share of the job's wall time that trained, as of
	// the coordinator's last account of it ("97.3%"): `coordinator
	// status` has it up to the moment, with the seconds lost by cause.
	Goodput string `json:"goodput,omitempty"`
	// Message says why the job is in its phase.
	Message string `json:"message,omitempty"`
	// Problem is what keeps Kubernetes from following the job, if anything.
	Problem string `json:"problem,omitempty"`
	// ObservedGeneration is the metadata.generation last acted on.
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}
