package jobcontroller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/etcdauth"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/trainerenv"
)

// Sidecar is what the controller injects into every pod of a job.
type Sidecar struct {
	// Image holds the coordinator binary; an init container copies it
	// into the pod.
	Image string
	// EtcdEndpoints are the etcd endpoints the sidecars use.
	EtcdEndpoints string
	// Prefix is the root of the keys in etcd.
	Prefix string
	// EtcdSecret, if set, is a Secret with the sidecars' etcd client
	// certificate: ca.crt, tls.crt and tls.key, in SecretNamespace. Each
	// job gets a copy in its own Secret, in its own namespace.
	EtcdSecret      string
	SecretNamespace string
	// Auth gives each job's sidecars an etcd user confined to the job's
	// keys, its password in the Secret <job>-etcd.
	Auth bool
}

// JobSecretName names a job's Secret: its sidecars' etcd client
// certificate and its etcd user's password.
func JobSecretName(job string) string { return job + "-etcd" }

// jobSecret reports whether the job's pods need their Secret.
func (sc Sidecar) jobSecret() bool { return sc.EtcdSecret != "" || sc.Auth }

// Paths inside the pod.
const (
	binDir    = "/elastic"
	binary    = binDir + "/coordinator"
	tlsDir    = "/etc/elastic/etcd"
	binVolume = "elastic-bin"
	// stateDir keeps the sidecar's state for the sidecar of the
	// container's next start (package handover): an emptyDir lives as
	// long as the pod, a container's own file system only as long as it.
	stateDir    = "/var/run/elastic"
	stateVolume = "elastic-state"
	tlsVolume   = "elastic-etcd-tls"
	initName    = "elastic-install"
	hashAnnote  = "elastic.template-hash"
)

// templateError is why a role's template cannot take the sidecar: the
// user's to fix, not worth retrying until the resource changes.
type templateError struct{ role, problem string }

func (e templateError) Error() string { return fmt.Sprintf("%s template: %s", e.role, e.problem) }

// StatefulSetName names the StatefulSet of a job's role.
func StatefulSetName(job string, role membership.Role) string { return job + "-" + string(role) }

// statefulSet is the StatefulSet of one role: the role's template with the
// sidecar injected, under the job's labels, owned by the job. Its pods
// start in parallel, and a changed template reaches only the pods created
// after it (OnDelete): a rolling update would restart the job behind the
// coordinator's back.
func statefulSet(j Job, r Role, sc Sidecar, command commandOf) (*appsv1.StatefulSet, error) {
	labels := map[string]string{jobv1.LabelJob: j.ID, jobv1.LabelRole: string(r.Name)}
	tmpl, err := inject(j, r, sc, command)
	if err != nil {
		return nil, err
	}
	sum, err := hash(tmpl)
	if err != nil {
		return nil, err
	}
	replicas := int32(r.Replicas)
	if j.Spec.Suspend {
		replicas = 0 // a suspended job has no pods
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: StatefulSetName(j.ID, r.Name), Namespace: j.Namespace, Labels: labels,
			Annotations:     map[string]string{hashAnnote: sum},
			OwnerReferences: []metav1.OwnerReference{j.Owner},
		},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			ServiceName:         j.ID,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Template:            tmpl,
		},
	}, nil
}

// commandOf is the command a container runs: its command and arguments,
// or its image's where it gives none.
type commandOf func(c *corev1.Container) ([]string, error)

// inject returns the role's template with the sidecar in it: the binary
// copied in by an init container, the training container's command
// wrapped by `coordinator sidecar`, and the variables the sidecar reads.
func inject(j Job, r Role, sc Sidecar, command commandOf) (corev1.PodTemplateSpec, error) {
	t := *r.Template.DeepCopy()
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	t.Labels[jobv1.LabelJob], t.Labels[jobv1.LabelRole] = j.ID, string(r.Name)
	if j.Intranet == jobv1.IntranetService {
		if t.Annotations == nil {
			t.Annotations = map[string]string{}
		}
		t.Annotations[jobv1.AnnotationIntranet] = jobv1.IntranetService
	}
	spec := &t.Spec
	if len(spec.Containers) == 0 {
		return t, templateError{role: string(r.Name), problem: "no containers"}
	}
	// A StatefulSet's pods restart always; the sidecar decides what a
	// training process's exit means (paddle-operator's pods of Never or
	// OnFailure were bare pods).
	spec.RestartPolicy = corev1.RestartPolicyAlways
	if j.Intranet == jobv1.IntranetHost {
		spec.HostNetwork, spec.DNSPolicy = true, corev1.DNSClusterFirstWithHostNet
	}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: binVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	binMount := corev1.VolumeMount{Name: binVolume, MountPath: binDir}
	spec.InitContainers = append([]corev1.Container{{
		Name: initName, Image: sc.Image, Args: []string{"install", binary},
		VolumeMounts: []corev1.VolumeMount{binMount},
	}}, spec.InitContainers...)

	c := &spec.Containers[trainingContainer(spec)]
	training, err := command(c)
	var unreadable unreadableImage
	if errors.As(err, &unreadable) {
		return t, unreadableImage{fmt.Errorf("%s template: container %s has no command, and its image's cannot be read yet (%v); trying again every %s",
			r.Name, c.Name, unreadable.err, imageRetry)}
	}
	if err != nil {
		return t, templateError{role: string(r.Name), problem: fmt.Sprintf(
			"container %s has no command, and its image's is unknown (%v); give the training command, which the sidecar wraps", c.Name, err)}
	}
	// A StatefulSet restarts whatever exits: the sidecar holds once the
	// job has ended, until its pod goes.
	wrapped := []string{binary, "sidecar", "--role=" + string(r.Name), "--hold-when-done"}
	if j.Framework != trainerenv.AnyFramework {
		wrapped = append(wrapped, "--framework="+string(j.Framework))
	}
	if n, ok := gpus(c); ok {
		// The device plugin shows the container its GPUs as 0..n-1.
		wrapped = append(wrapped, fmt.Sprintf("--devices=%d", n))
	}
	if j.hasRole(membership.RolePS) && j.WithGloo >= 0 {
		// As paddle-operator does: every pod of a job with parameter
		// servers is told the level, the first server to start the store.
		wrapped = append(wrapped, fmt.Sprintf("--with-gloo=%d", j.WithGloo))
	}
	if r.Port > 0 {
		wrapped = append(wrapped, fmt.Sprintf("--port=%d", r.Port))
	}
	c.Command = append(append(wrapped, "--"), training...)
	c.Args = nil
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: stateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	c.VolumeMounts = append(c.VolumeMounts, binMount, corev1.VolumeMount{Name: stateVolume, MountPath: stateDir})
	c.Env = append(c.Env, sidecarEnv(j, sc)...)
	if sc.EtcdSecret != "" {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: tlsVolume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: JobSecretName(j.ID), DefaultMode: ptr(int32(0o440)),
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}, {Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}}}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: tlsVolume, MountPath: tlsDir, ReadOnly: true})
	}
	return t, nil
}

// gpuResources are the extended resources that are GPUs, whose device
// plugins show a container its devices as CUDA's 0..n-1.
var gpuResources = []corev1.ResourceName{"nvidia.com/gpu", "amd.com/gpu"}

// gpus is the number of GPUs container c asks for, and whether it asks.
func gpus(c *corev1.Container) (int64, bool) {
	for _, name := range gpuResources {
		if q, ok := c.Resources.Limits[name]; ok {
			return q.Value(), true
		}
		if q, ok := c.Resources.Requests[name]; ok {
			return q.Value(), true
		}
	}
	return 0, false
}

// sidecarEnv are the variables of the sidecar: the job, etcd, and the pod
// through the downward API.
func sidecarEnv(j Job, sc Sidecar) []corev1.EnvVar {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	intranet := j.Intranet
	if intranet == jobv1.IntranetHost {
		intranet = jobv1.IntranetPodIP // with the host's network the pod's IP is the host's
	}
	env := []corev1.EnvVar{
		{Name: "ELASTIC_JOB_ID", Value: j.ID},
		{Name: "ELASTIC_ETCD_ENDPOINTS", Value: sc.EtcdEndpoints},
		{Name: "ELASTIC_INTRANET", Value: intranet},
		{Name: "ELASTIC_STATE_DIR", Value: stateDir},
		field("POD_NAME", "metadata.name"),
		field("POD_NAMESPACE", "metadata.namespace"),
		field("POD_UID", "metadata.uid"),
		field("POD_IP", "status.podIP"),
	}
	if sc.Prefix != "" {
		env = append(env, corev1.EnvVar{Name: "ELASTIC_PREFIX", Value: sc.Prefix})
	}
	if j.InPlace {
		env = append(env, corev1.EnvVar{Name: "ELASTIC_IN_PLACE", Value: "1"})
	}
	if len(j.Preload) > 0 {
		env = append(env, corev1.EnvVar{Name: "ELASTIC_PRELOAD", Value: strings.Join(j.Preload, ",")})
	}
	if sc.Auth {
		env = append(env, corev1.EnvVar{Name: "ELASTIC_ETCD_USER", Value: etcdauth.JobUser(j.ID)},
			corev1.EnvVar{Name: "ELASTIC_ETCD_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: JobSecretName(j.ID)}, Key: "password"}}})
	}
	if sc.EtcdSecret != "" {
		env = append(env,
			corev1.EnvVar{Name: "ELASTIC_ETCD_CACERT", Value: path.Join(tlsDir, "ca.crt")},
			corev1.EnvVar{Name: "ELASTIC_ETCD_CERT", Value: path.Join(tlsDir, "tls.crt")},
			corev1.EnvVar{Name: "ELASTIC_ETCD_KEY", Value: path.Join(tlsDir, "tls.key")})
	}
	return env
}

// hash is a digest of a template: the StatefulSet is updated when it
// changes, and not because the API server filled in defaults.
func hash(t corev1.PodTemplateSpec) (string, error) {
	data, err := json.Marshal(t)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8]), nil
}
