package v1

// Labels and annotations on what a job's pods are made of. The job
// controller puts them on the objects it creates; a job written as plain
// workloads carries them itself; the bridge and the autoscaler find a job's
// workloads and pods by them.
const (
	// LabelJob names the job a workload or pod belongs to.
	LabelJob = "elastic.job"
	// LabelRole is the role of a workload's pods: worker, ps, scheduler or
	// heter.
	LabelRole = "elastic.role"
	// AnnotationIntranet on a pod, "Service" (IntranetService), asks for a
	// headless Service of the pod's name that the pod's sidecar advertises.
	AnnotationIntranet = "elastic.intranet"
	// AnnotationGeneration on a job's endpoint ConfigMap is the generation
	// it describes.
	AnnotationGeneration = "elastic.generation"
	// AnnotationPreload on a job of a kind that has no field for it
	// (PaddleJob, MSJob) is ElasticJob's spec.preload: Python modules,
	// comma-separated, that warm interpreters import ahead of each
	// generation.
	AnnotationPreload = "elastic.preload"
	// AnnotationInPlace, "true", on a job of a kind that has no field for
	// it (PaddleJob, MSJob) is an ElasticJob's spec.inPlace.
	AnnotationInPlace = "elastic.in-place"
	// AnnotationHangTimeout, AnnotationStartupTimeout and
	// AnnotationMaxHangRestarts on a job of a kind that has no field for
	// them (PaddleJob, MSJob) are an ElasticJob's spec.hangTimeout,
	// spec.startupTimeout and spec.maxHangRestarts.
	AnnotationHangTimeout     = "elastic.hang-timeout"
	AnnotationStartupTimeout  = "elastic.startup-timeout"
	AnnotationMaxHangRestarts = "elastic.max-hang-restarts"
	// AnnotationSpares on a job of a kind that has no field for it
	// (PaddleJob, MSJob) is an ElasticJob's spec.worker.spares: worker
	// pods kept registered and warm beyond the target, holding no rank.
	AnnotationSpares = "elastic.spares"
	// AnnotationSuspend "true" on a job of a kind that has no field for
	// it (PaddleJob) suspends it, as an ElasticJob's spec.suspend does;
	// on the other kinds it suspends the job too.
	AnnotationSuspend = "elastic.suspend"
)

// Intranet modes: how a job's nodes reach each other (spec.intranet).
const (
	// IntranetPodIP: by pod IP, the default.
	IntranetPodIP = "PodIP"
	// IntranetService: by a headless Service per pod.
	IntranetService = "Service"
	// IntranetHost: on the host's network.
	IntranetHost = "Host"
)
