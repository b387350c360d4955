package jobcontroller

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/trainerenv"
)

// Job is a training job as a resource of any of the kinds served describes
// it: what the controller makes Kubernetes and etcd hold.
type Job struct {
	// Owner refers to the resource; everything made for the job is owned
	// by it, so that it goes when the resource is deleted.
	Owner     metav1.OwnerReference
	Namespace string
	// ID is the job's id in etcd: the resource's name.
	ID    string
	Roles []Role
	// Spec is the etcd spec, Owner included.
	Spec membership.Spec
	// Intranet is jobv1.IntranetPodIP, jobv1.IntranetService or jobv1.IntranetHost.
	Intranet string
	// WithGloo is PaddlePaddle's 0, 1 (workers) or 2 (workers and
	// servers); -1 for the sidecars' default, Paddle's launcher's.
	WithGloo int
	// Preload are the Python modules the sidecars keep warm interpreters
	// of (ELASTIC_PRELOAD): ElasticJob's spec.preload, or the annotation
	// jobv1.AnnotationPreload on the other kinds.
	Preload []string
	// InPlace is the sidecars' --in-place (ELASTIC_IN_PLACE): ElasticJob's
	// spec.inPlace, or the annotation jobv1.AnnotationInPlace.
	InPlace bool
	// Framework is the sidecars' --framework: the kind's (a PaddleJob's
	// paddle, an MSJob's mindspore) or an ElasticJob's spec.framework.
	Framework trainerenv.Framework
	// Clamped, if set, says how the replicas asked for were brought within
	// the job's bounds: said as an Event and in the status.
	Clamped string
}

// clamped is the message of replicas asked brought to run within least
// and most.
func clamped(field string, asked, least, most, run int) string {
	return fmt.Sprintf("%s %d is outside %d..%d: the job runs %s", field, asked, least, most, english.Count(run, "worker"))
}

// hasRole reports whether the job has pods of the role.
func (j Job) hasRole(name membership.Role) bool {
	return slices.ContainsFunc(j.Roles, func(r Role) bool { return r.Name == name && r.Replicas > 0 })
}

// Role is one role's pods.
type Role struct {
	Name     membership.Role
	Replicas int
	Template corev1.PodTemplateSpec
	// Port, if set, is the first endpoint port of the role's nodes (the
	// MindSpore scheduler's port).
	Port int
}

// ownerRef refers to a resource as the controller of what is made for it.
func ownerRef(u *unstructured.Unstructured) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName(), UID: u.GetUID(), Controller: ptr(true),
	}
}

// fromElasticJob reads an ElasticJob. The API server has checked it against
// the CRD's schema; what the schema cannot say is checked here.
func fromElasticJob(u *unstructured.Unstructured) (Job, error) {
	var ej jobv1.ElasticJob
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ej); err != nil {
		return Job{}, fmt.Errorf("read %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	s := ej.Spec
	if s.Worker == nil {
		return Job{}, fmt.Errorf("spec.worker: required")
	}
	workers := int(deref(s.Worker.Replicas, 1))
	// Scaled below its minimum, a job runs at exactly its replicas.
	least := min(int(deref(s.Worker.MinReplicas, int32(workers))), workers)
	spec := membership.DefaultSpec(membership.NP{Min: least, Max: workers})
	clamp := ""
	if s.Worker.MaxReplicas != nil {
		// Autoscaled: np is the bounds, replicas the target within them.
		least = int(deref(s.Worker.MinReplicas, 1))
		most := max(int(*s.Worker.MaxReplicas), least)
		asked := workers
		workers = min(max(workers, least), most)
		spec = membership.DefaultSpec(membership.NP{Min: least, Max: most})
		spec.Target = workers
		if asked != workers {
			clamp = clamped("spec.worker.replicas", asked, least, most, workers)
		}
	}
	spec.FaultTolerance = deref(s.FaultTolerance, membership.FaultToleranceRestart)
	spec.MaxRestarts = deref(s.MaxRestarts, membership.DefaultMaxRestarts)
	var err error
	if spec.HangTimeout, err = membership.ParseHangTimeout(s.HangTimeout, guard.MinHangTimeout); err != nil {
		return Job{}, fmt.Errorf("spec.hangTimeout %w", err)
	}
	if spec.StartupTimeout, err = membership.ParseHangTimeout(s.StartupTimeout, guard.MinHangTimeout); err != nil {
		return Job{}, fmt.Errorf("spec.startupTimeout %w", err)
	}
	spec.MaxHangRestarts = deref(s.MaxHangRestarts, membership.DefaultMaxHangRestarts)
	spec.SuccessPolicy = membership.SuccessPolicy(or(s.SuccessPolicy, string(membership.SuccessAllWorkers)))
	spec.CleanPodPolicy = membership.CleanPodPolicy(or(s.CleanPodPolicy, string(membership.CleanPodNever)))
	spec.Priority = s.Priority
	spec.Suspend = deref(s.Suspend, false)
	if s.Worker.Spares != nil {
		spec.Spares = int(*s.Worker.Spares)
	}
	for _, r := range []struct {
		field string
		spec  *jobv1.RoleSpec
	}{{"ps", s.PS}, {"scheduler", s.Scheduler}, {"heter", s.Heter}} {
		if r.spec != nil && r.spec.Spares != nil {
			return Job{}, fmt.Errorf("spec.%s.spares: only workers have spares", r.field)
		}
	}
	roles := []Role{{Name: membership.RoleWorker, Replicas: workers, Template: s.Worker.Template}}
	if s.PS != nil {
		spec.PS = int(deref(s.PS.Replicas, 1))
		roles = append(roles, Role{Name: membership.RolePS, Replicas: spec.PS, Template: s.PS.Template})
	}
	if s.Scheduler != nil {
		spec.Schedulers = int(deref(s.Scheduler.Replicas, 1))
		roles = append(roles, Role{Name: membership.RoleScheduler, Replicas: spec.Schedulers, Template: s.Scheduler.Template})
	}
	if s.Heter != nil {
		spec.Heter = int(deref(s.Heter.Replicas, 1))
		roles = append(roles, Role{Name: membership.RoleHeter, Replicas: spec.Heter, Template: s.Heter.Template})
	}
	// Unset, the sidecars take Paddle's launcher's default (-1).
	j, err := newJob(u, spec, roles, or(s.Intranet, jobv1.IntranetPodIP), deref(s.WithGloo, -1))
	if err != nil {
		return j, err
	}
	j.Clamped = clamp
	if j.Framework, err = trainerenv.ParseFramework(s.Framework); err != nil {
		return Job{}, fmt.Errorf("spec.%w", err)
	}
	j.InPlace = j.InPlace || s.InPlace
	if len(s.Preload) == 0 {
		return j, nil
	}
	if err := validPreload(s.Preload, "spec.preload"); err != nil {
		return Job{}, err
	}
	j.Preload = s.Preload
	return j, nil
}

// newJob completes a job read from resource u.
func newJob(u *unstructured.Unstructured, spec membership.Spec, roles []Role, intranet string, withGloo int) (Job, error) {
	j := Job{Owner: ownerRef(u), Namespace: u.GetNamespace(), ID: u.GetName(), Roles: roles, Intranet: intranet, WithGloo: withGloo}
	if err := membership.ValidateJobID(j.ID); err != nil {
		return Job{}, fmt.Errorf("metadata.name: %w", err)
	}
	for _, r := range roles {
		// A StatefulSet's pods carry a controller-revision-hash label of
		// its name, '-' and up to 10 characters: 63 at most.
		if name := StatefulSetName(j.ID, r.Name); len(name)+11 > 63 {
			return Job{}, fmt.Errorf("metadata.name: %q is too long: the %s pods' labels would pass 63 characters (at most %d here)",
				j.ID, r.Name, 63-11-len(name)+len(j.ID))
		}
	}
	switch intranet {
	case jobv1.IntranetPodIP, jobv1.IntranetService, jobv1.IntranetHost:
	default:
		return Job{}, fmt.Errorf("spec.intranet %q: want PodIP, Service or Host", intranet)
	}
	if a := u.GetAnnotations()[jobv1.AnnotationPreload]; a != "" {
		for _, m := range strings.Split(a, ",") {
			if m = strings.TrimSpace(m); m != "" {
				j.Preload = append(j.Preload, m)
			}
		}
		if err := validPreload(j.Preload, "metadata.annotations["+jobv1.AnnotationPreload+"]"); err != nil {
			return Job{}, err
		}
	}
	if a, ok := u.GetAnnotations()[jobv1.AnnotationInPlace]; ok {
		in, err := strconv.ParseBool(a)
		if err != nil {
			return Job{}, fmt.Errorf("metadata.annotations[%s] %q: want true or false", jobv1.AnnotationInPlace, a)
		}
		j.InPlace = in
	}
	if err := hangAnnotations(u.GetAnnotations(), &spec); err != nil {
		return Job{}, err
	}
	if err := sparesAnnotation(u.GetAnnotations(), &spec); err != nil {
		return Job{}, err
	}
	if v, ok := u.GetAnnotations()[jobv1.AnnotationSuspend]; ok {
		suspend, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return Job{}, fmt.Errorf("metadata.annotations[%s] %q: want true or false", jobv1.AnnotationSuspend, v)
		}
		spec.Suspend = spec.Suspend || suspend
	}
	spec.Owner = jobv1.Owner{Kind: j.Owner.Kind, Namespace: j.Namespace, Name: j.Owner.Name, UID: string(j.Owner.UID)}.String()
	if err := spec.Validate(); err != nil {
		return Job{}, fmt.Errorf("spec: %w", err)
	}
	// The spares are pods of the workers' StatefulSet beyond the target,
	// the highest ordinals: a scale-down removes them first.
	for i := range j.Roles {
		if j.Roles[i].Name == membership.RoleWorker {
			j.Roles[i].Replicas += spec.Spares
		}
	}
	// The job's age is the resource's (`coordinator jobs`' AGE).
	if created := u.GetCreationTimestamp(); !created.IsZero() {
		spec.CreatedAt = created.UTC().Truncate(time.Second)
	}
	j.Spec = spec
	return j, nil
}

// hangAnnotations sets the spec's hang watch from the job's annotations,
// where a kind has no field for it (PaddleJob, MSJob); on an ElasticJob
// they stand in for fields left unset.
func hangAnnotations(a map[string]string, spec *membership.Spec) error {
	for key, field := range map[string]**membership.Duration{
		jobv1.AnnotationHangTimeout: &spec.HangTimeout, jobv1.AnnotationStartupTimeout: &spec.StartupTimeout,
	} {
		v, ok := a[key]
		if !ok || *field != nil {
			continue
		}
		d, err := membership.ParseHangTimeout(v, guard.MinHangTimeout)
		if err != nil {
			return fmt.Errorf("metadata.annotations[%s] %w", key, err)
		}
		*field = d
	}
	if v, ok := a[jobv1.AnnotationMaxHangRestarts]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return fmt.Errorf("metadata.annotations[%s] %q: want a number of restarts, 0 or more", jobv1.AnnotationMaxHangRestarts, v)
		}
		spec.MaxHangRestarts = n
	}
	return nil
}

// sparesAnnotation sets the spec's spares from the job's annotation, where
// a kind has no field for them (PaddleJob, MSJob); on an ElasticJob it
// stands in for spec.worker.spares left unset.
func sparesAnnotation(a map[string]string, spec *membership.Spec) error {
	v, ok := a[jobv1.AnnotationSpares]
	if !ok || spec.Spares != 0 {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return fmt.Errorf("metadata.annotations[%s] %q: want a number of spare workers, 0 or more", jobv1.AnnotationSpares, v)
	}
	spec.Spares = n
	return nil
}

// validPreload checks the module names of field.
func validPreload(mods []string, field string) error {
	for _, m := range mods {
		if !guard.ValidModule(m) {
			return fmt.Errorf("%s: %q is not a Python module name", field, m)
		}
	}
	return nil
}

// trainingContainer is the index of the container the sidecar wraps: the
// one named after a framework, or else the first.
func trainingContainer(spec *corev1.PodSpec) int {
	for i, c := range spec.Containers {
		if slices.Contains([]string{"paddle", "mindspore", "pytorch", "trainer"}, c.Name) {
			return i
		}
	}
	return 0
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func ptr[T any](v T) *T { return &v }
