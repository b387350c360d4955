package jobcontroller

import (
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/trainerenv"
)

// Kind is a kind of resource whose jobs the controller runs (api/v1's
// JobKind). Each reads its resource into a Job and renders the
// controller's report of the job as its own status.
type Kind struct {
	jobv1.JobKind
	// job reads a resource.
	job func(u *unstructured.Unstructured) (Job, error)
	// status renders a report of job j (nil if it could not be read) as
	// the status of a resource whose status is old.
	status func(r jobv1.ElasticJobStatus, j *Job, old map[string]any) (map[string]any, error)
}

// Kinds served.
var (
	ElasticJobs = Kind{JobKind: jobv1.ElasticJobs, job: fromElasticJob, status: elasticJobStatus}
	PaddleJobs  = Kind{JobKind: jobv1.PaddleJobs, job: fromPaddleJob, status: paddleJobStatus}
	MSJobs      = Kind{JobKind: jobv1.MSJobs, job: fromMSJob, status: msJobStatus}
)

// AllKinds are the kinds served by default: api/v1's JobKinds.
var AllKinds = []Kind{ElasticJobs, PaddleJobs, MSJobs}

// KindNamed finds a kind by name.
func KindNamed(name string) (Kind, bool) {
	i := slices.IndexFunc(AllKinds, func(k Kind) bool { return k.Name == name })
	if i < 0 {
		return Kind{}, false
	}
	return AllKinds[i], true
}

func elasticJobStatus(r jobv1.ElasticJobStatus, _ *Job, _ map[string]any) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(&r)
}

// paddleJob is the part of a PaddleJob (batch.paddlepaddle.org/v1) that
// the controller reads.
type paddleJob struct {
	Spec struct {
		CleanPodPolicy string     `json:"cleanPodPolicy"`
		Intranet       string     `json:"intranet"`
		WithGloo       *int       `json:"withGloo"`
		Elastic        *int       `json:"elastic"`
		PS             *paddleRes `json:"ps"`
		Worker         *paddleRes `json:"worker"`
		Heter          *paddleRes `json:"heter"`
	} `json:"spec"`
}

type paddleRes struct {
	Replicas int `json:"replicas"`
	// Requests and Limits are the fewest and most replicas of an elastic
	// job.
	Requests *int                   `json:"requests"`
	Limits   *int                   `json:"limits"`
	Template corev1.PodTemplateSpec `json:"template"`
}

// fromPaddleJob reads a PaddleJob as paddle-operator defines it: ps and
// worker pod templates, withGloo (1 if unset), intranet, cleanPodPolicy;
// workers with limits run elastic: np REQUESTS:REPLICAS, replicas kept
// within requests..limits.
func fromPaddleJob(u *unstructured.Unstructured) (Job, error) {
	var pj paddleJob
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pj); err != nil {
		return Job{}, fmt.Errorf("read PaddleJob %s: %w", u.GetName(), err)
	}
	s := pj.Spec
	// The CRD of deploy/ refuses these; paddle-operator's own does not.
	switch {
	case s.Worker == nil:
		return Job{}, fmt.Errorf("spec.worker: a PaddleJob needs a worker")
	case s.Worker.Replicas < 1:
		return Job{}, fmt.Errorf("spec.worker.replicas %d: a PaddleJob needs a worker", s.Worker.Replicas)
	}
	spec := membership.DefaultSpec(membership.NP{Min: s.Worker.Replicas, Max: s.Worker.Replicas})
	clamp := ""
	if limit := deref(s.Worker.Limits, 0); limit > 0 {
		// Elastic: np is requests..limits, the bounds an autoscaler keeps
		// to; replicas, kept within them, is the target. The job runs on
		// as few as requests.
		least := min(deref(s.Worker.Requests, s.Worker.Replicas), limit)
		spec = membership.DefaultSpec(membership.NP{Min: least, Max: limit})
		spec.Target = min(max(s.Worker.Replicas, least), limit)
		if spec.Target != s.Worker.Replicas {
			clamp = clamped("spec.worker.replicas", s.Worker.Replicas, least, limit, spec.Target)
		}
	}
	spec.CleanPodPolicy = membership.CleanPodPolicy(or(s.CleanPodPolicy, string(membership.CleanPodNever)))
	roles := []Role{{Name: membership.RoleWorker, Replicas: spec.Workers().Max, Template: s.Worker.Template}}
	if s.PS != nil && s.PS.Replicas > 0 {
		spec.PS = s.PS.Replicas
		roles = append(roles, Role{Name: membership.RolePS, Replicas: s.PS.Replicas, Template: s.PS.Template})
	}
	if s.Heter != nil && s.Heter.Replicas > 0 {
		spec.Heter = s.Heter.Replicas
		roles = append(roles, Role{Name: membership.RoleHeter, Replicas: s.Heter.Replicas, Template: s.Heter.Template})
	}
	j, err := newJob(u, spec, roles, or(s.Intranet, jobv1.IntranetPodIP), deref(s.WithGloo, 1))
	j.Framework, j.Clamped = trainerenv.Paddle, clamp
	return j, err
}

// paddleJobStatus renders a report as paddle-operator's status: its phase
// names (Succeed, not Succeeded), the mode, and each role's counts.
func paddleJobStatus(r jobv1.ElasticJobStatus, j *Job, _ map[string]any) (map[string]any, error) {
	phase := r.Phase
	switch phase {
	case jobv1.PhaseWaiting:
		phase = "Starting"
	case jobv1.PhaseSucceeded:
		phase = "Succeed"
	}
	mode := "Collective"
	if j != nil && j.Spec.PS > 0 {
		mode = "PS"
	}
	out := map[string]any{
		"phase": phase, "mode": mode, "observedGeneration": r.ObservedGeneration,
		"worker":          map[string]any{"running": int64(r.WorkersReady), "ready": fmt.Sprintf("%d/%d", r.WorkersReady, r.Replicas)},
		"elasticTraining": ownReport(r),
	}
	for _, role := range []membership.Role{membership.RolePS, membership.RoleHeter} {
		if rs, ok := r.ReplicaStatuses[string(role)]; ok {
			out[string(role)] = map[string]any{"running": int64(rs.Ready), "ready": fmt.Sprintf("%d/%d", rs.Ready, rs.Replicas)}
		}
	}
	return out, nil
}

// ownReport is the coordinator's report of a job in the status of a kind
// that has no fields for it, for `kubectl get -o yaml`.
func ownReport(r jobv1.ElasticJobStatus) map[string]any {
	return map[string]any{
		"generation": r.Generation, "np": r.NP, "worldSize": int64(r.WorldSize), "restarts": int64(r.Restarts),
		"failureRestarts": int64(r.FailureRestarts), "hangRestarts": int64(r.HangRestarts), "message": r.Message, "problem": r.Problem,
		"goodput": r.Goodput,
	}
}

// msJob is the part of an MSJob (mindspore.gitee.com/v1) that the
// controller reads.
type msJob struct {
	Spec struct {
		RunPolicy struct {
			CleanPodPolicy string `json:"cleanPodPolicy"`
			Suspend        *bool  `json:"suspend"`
		} `json:"runPolicy"`
		SuccessPolicy  string                   `json:"successPolicy"`
		MSReplicaSpecs map[string]msReplicaSpec `json:"msReplicaSpecs"`
	} `json:"spec"`
}

type msReplicaSpec struct {
	Replicas      *int                   `json:"replicas"`
	RestartPolicy string                 `json:"restartPolicy"`
	Template      corev1.PodTemplateSpec `json:"template"`
}

// msRetryable are the exit codes ms-operator's restartPolicy ExitCode
// retries: killed by SIGINT, SIGKILL, SIGTERM or SIGUSR1 (128+n).
var msRetryable = []int{130, 137, 138, 143}

// fromMSJob reads an MSJob as ms-operator defines it: Scheduler, PS and
// Worker replica specs; runPolicy.cleanPodPolicy All, Running or None;
// successPolicy "" (worker 0 succeeded) or AllWorkers; restartPolicy
// Never (a failure ends the job), OnFailure and Always (restart), ExitCode
// (restart only for the retryable exit codes).
func fromMSJob(u *unstructured.Unstructured) (Job, error) {
	var mj msJob
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &mj); err != nil {
		return Job{}, fmt.Errorf("read MSJob %s: %w", u.GetName(), err)
	}
	s := mj.Spec
	names := make([]string, 0, len(s.MSReplicaSpecs))
	for name := range s.MSReplicaSpecs {
		names = append(names, name)
	}
	sort.Strings(names)
	// The CRD of deploy/ refuses these; ms-operator's own does not.
	worker, ok := s.MSReplicaSpecs["Worker"]
	switch {
	case !ok:
		return Job{}, fmt.Errorf("spec.msReplicaSpecs.Worker: an MSJob needs a worker")
	case deref(worker.Replicas, 1) < 1:
		return Job{}, fmt.Errorf("spec.msReplicaSpecs.Worker.replicas %d: an MSJob needs a worker", *worker.Replicas)
	}
	workers := deref(worker.Replicas, 1)
	spec := membership.DefaultSpec(membership.NP{Min: workers, Max: workers})
	switch s.RunPolicy.CleanPodPolicy {
	case "All", "Running":
		// Every pod of a job that ended still runs its sidecar: both
		// remove them all.
		spec.CleanPodPolicy = membership.CleanPodAlways
	case "None", "":
		spec.CleanPodPolicy = membership.CleanPodNever
	default:
		return Job{}, fmt.Errorf("spec.runPolicy.cleanPodPolicy %q: want All, Running or None", s.RunPolicy.CleanPodPolicy)
	}
	spec.Suspend = deref(s.RunPolicy.Suspend, false)
	switch s.SuccessPolicy {
	case "":
		spec.SuccessPolicy = membership.SuccessRank0
	case "AllWorkers":
		spec.SuccessPolicy = membership.SuccessAllWorkers
	default:
		return Job{}, fmt.Errorf("spec.successPolicy %q: want \"\" or AllWorkers", s.SuccessPolicy)
	}
	switch worker.RestartPolicy {
	case "Never":
		spec.FaultTolerance = membership.FaultToleranceNone
	case "ExitCode":
		spec.RetryableExitCodes = msRetryable
	case "", "OnFailure", "Always":
	default:
		return Job{}, fmt.Errorf("spec.msReplicaSpecs.Worker.restartPolicy %q: want Always, OnFailure, Never or ExitCode", worker.RestartPolicy)
	}
	var roles []Role
	for _, name := range names {
		rs := s.MSReplicaSpecs[name]
		n := deref(rs.Replicas, 1)
		switch name {
		case "Worker":
			roles = append(roles, Role{Name: membership.RoleWorker, Replicas: n, Template: rs.Template})
		case "PS":
			spec.PS = n
			roles = append(roles, Role{Name: membership.RolePS, Replicas: n, Template: rs.Template})
		case "Scheduler":
			spec.Schedulers = n
			roles = append(roles, Role{Name: membership.RoleScheduler, Replicas: n, Template: rs.Template, Port: msPort(rs.Template)})
		default:
			return Job{}, fmt.Errorf("spec.msReplicaSpecs.%s: want Scheduler, PS or Worker", name)
		}
	}
	j, err := newJob(u, spec, roles, jobv1.IntranetPodIP, 0)
	j.Framework = trainerenv.MindSpore
	return j, err
}

// msPort is the scheduler's port: the training container's port named
// msjob-port, or ms-operator's default 2222.
func msPort(t corev1.PodTemplateSpec) int {
	for _, c := range t.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "msjob-port" {
				return int(p.ContainerPort)
			}
		}
	}
	return 2222
}

// msJobStatus renders a report as kubeflow's job status, which ms-operator
// uses: conditions as kubeflow's common job controller keeps them, each
// role's active pods, and the workers' for the scale subresource.
//
// Created is true from the start and stays so. Running, Restarting,
// Succeeded and Failed are set true as the job gets there, the one set
// last moved to the end (the State column shows it); Running and
// Restarting turn each other false, and an end turns Running false. A
// condition set again with another message keeps its lastTransitionTime
// and takes the message: Restarting names the current generation.
func msJobStatus(r jobv1.ElasticJobStatus, j *Job, old map[string]any) (map[string]any, error) {
	stamp := time.Now().UTC().Format(time.RFC3339)
	conds, _, _ := unstructured.NestedSlice(old, "conditions")
	var list []map[string]any
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok {
			list = append(list, m)
		}
	}
	find := func(typ string) int {
		return slices.IndexFunc(list, func(m map[string]any) bool { return m["type"] == typ })
	}
	// set makes typ's condition say status and message; a true one that
	// changed moves to the end.
	set := func(typ, status, message string) {
		i := find(typ)
		if i < 0 {
			if status != "True" {
				return // a condition never reached is not listed
			}
			list = append(list, map[string]any{"type": typ, "status": status, "reason": "MSJob" + typ, "message": message,
				"lastUpdateTime": stamp, "lastTransitionTime": stamp})
			return
		}
		m := list[i]
		if m["status"] == status && (status != "True" || m["message"] == message) {
			return
		}
		if m["status"] != status {
			m["lastTransitionTime"] = stamp
		}
		m["status"], m["lastUpdateTime"] = status, stamp
		if status == "True" {
			m["message"] = message
			list = append(append(list[:i:i], list[i+1:]...), m)
		}
	}
	set("Created", "True", "MSJob is created and served by the coordinator")
	message := generationMessage(r)
	switch r.Phase {
	case jobv1.PhaseRunning:
		set("Restarting", "False", "")
		set("Running", "True", message)
	case jobv1.PhaseRestarting:
		set("Running", "False", "")
		set("Restarting", "True", message)
	case jobv1.PhaseSuspended:
		// Kubeflow's JobSuspended.
		set("Running", "False", "")
		set("Restarting", "False", "")
		set("Suspended", "True", message)
	case jobv1.PhaseSucceeded, jobv1.PhaseFailed:
		set("Running", "False", "")
		set("Restarting", "False", "")
		set(r.Phase, "True", message)
	}
	if r.Phase != jobv1.PhaseSuspended {
		set("Suspended", "False", "")
	}
	out := make([]any, len(list))
	for i, m := range list {
		out[i] = m
	}
	replicas := map[string]any{"Worker": map[string]any{"active": int64(r.WorkersReady)}}
	if j != nil {
		for role, name := range map[membership.Role]string{membership.RolePS: "PS", membership.RoleScheduler: "Scheduler"} {
			if rs, ok := r.ReplicaStatuses[string(role)]; ok {
				replicas[name] = map[string]any{"active": int64(rs.Ready)}
			}
		}
	}
	return map[string]any{
		"conditions":      out,
		"replicaStatuses": replicas,
		"elasticTraining": ownReport(r),
	}, nil
}
