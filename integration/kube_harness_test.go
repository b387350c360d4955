package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// The control plane is shared by the package's tests; each test has its own
// namespace, etcd and bridge.
var (
	clusterOnce sync.Once
	cluster     *kubetest.Cluster
	clusterErr  error
	clusterDir  string
)

// kubeCluster starts the control plane on first use. It fails in CI, where
// `make test` builds it, and skips elsewhere when it was not built.
func kubeCluster(t *testing.T) *kubetest.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		clusterDir, clusterErr = os.MkdirTemp("", "kube-")
		if clusterErr == nil {
			cluster, clusterErr = kubetest.Start(context.Background(), clusterDir)
		}
	})
	if clusterErr != nil {
		if errors.Is(clusterErr, kubetest.ErrNoBinaries) && os.Getenv("CI") == "" {
			t.Skip(clusterErr)
		}
		t.Fatalf("kubernetes control plane: %v", clusterErr)
	}
	return cluster
}

func stopCluster() {
	if cluster != nil {
		cluster.Stop()
	}
	if clusterDir != "" {
		os.RemoveAll(clusterDir)
	}
}

// kubeEnv is one test's namespace with the bridge running in it on the
// ServiceAccount and Role of deploy/rbac.yaml.
type kubeEnv struct {
	t          *testing.T
	c          *kubetest.Cluster
	ns         string
	etcd       *etcdtest.Server
	client     *jobclient.Client
	dyn        dynamic.Interface
	kubeconfig string // the bridge's: its ServiceAccount's token
	bridge     *bgProcess
	runner     *kubetest.PodRunner
	// toyDir holds the checkpoints of the jobs' toy trainers, a directory
	// per job, with the injected runner.
	toyDir string
}

type kubeOptions struct {
	// role replaces deploy/rbac.yaml's Role rules, to test RBAC denial.
	role string
	// bridgeArgs are added to `coordinator serve`.
	bridgeArgs []string
	// sidecarTTL is the stand-in sidecars' lease TTL.
	sidecarTTL time.Duration
	// toyEnv sets the toy trainer's variables.
	toyEnv []string
	// injected runs, for each pod, the command the job controller injected
	// into it, with its environment, in place of a sidecar started here:
	// for jobs written as ElasticJob, PaddleJob or MSJob.
	injected bool
	// etcdFlags, if set, are serve's flags to reach etcd in place of the
	// test's plain etcd.
	etcdFlags []string
	// allNamespaces binds deploy/all-namespaces' ClusterRole to the
	// test's ServiceAccount and runs serve with --all-namespaces.
	allNamespaces bool
	// autoscale grants the test's ServiceAccount deploy/autoscaler's
	// rules and runs serve with --autoscale.
	autoscale bool
	// deletionCost adds deploy/autoscaler-deletion-cost's rules and
	// --autoscale-deletion-cost to autoscale.
	deletionCost bool
	// homeKubeconfig runs serve without --kubeconfig, outside a pod, with
	// the kubeconfig in $HOME/.kube/config, as from a workstation.
	homeKubeconfig bool
	// defaultSidecarImage runs serve without --sidecar-image.
	defaultSidecarImage bool
	// kueue starts Kueue beside the control plane, binds deploy/kueue's
	// rules to the test's ServiceAccount and runs serve with --kueue.
	kueue bool
	// reportUnserved binds deploy/base's elastic-coordinator-unserved to
	// the test's ServiceAccount and has serve say unserved jobs after 3 s;
	// otherwise serve says none.
	reportUnserved bool
	// realTrainer, with injected, runs a real framework's job in place of
	// an image's training command it knows.
	realTrainer realTrainer
}

// realTrainer gives, for an image's training command that the machine
// cannot run as the image would, the command of a real framework's job
// that runs here in its place, and its variables; ok false leaves the
// command to the toy trainer. dir is the job's own directory.
type realTrainer func(training []string, dir string) (command, env []string, ok bool)

// toyTrainer is testdata/toytrainer.sh.
var toyTrainer = filepath.Join("testdata", "toytrainer.sh")

// sidecarImage is the image the tests' controller injects.
const sidecarImage = "elastic-coordinator:test"

func newKubeEnv(t *testing.T, o kubeOptions) *kubeEnv {
	t.Helper()
	c := kubeCluster(t)
	e := &kubeEnv{t: t, c: c, ns: "e-" + newMarker()[:10], etcd: etcdtest.Start(t)}
	var err error
	e.dyn, err = dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	e.client = jobclient.New(e.etcd.Client(t), membership.DefaultKeys())
	_, err = c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)

	e.setRole(o.role)
	if o.allNamespaces {
		manifest := strings.ReplaceAll(mustRead(t, filepath.Join(repoRoot, "deploy", "all-namespaces", "clusterrole.yaml")), "namespace: elastic-system", "namespace: "+e.ns)
		// A binding of the test's own; the ClusterRole is the same for all.
		manifest = strings.Replace(manifest, "kind: ClusterRoleBinding\nmetadata:\n  name: elastic-coordinator", "kind: ClusterRoleBinding\nmetadata:\n  name: elastic-coordinator-"+e.ns, 1)
		e.apply(manifest, "")
		o.bridgeArgs = append(o.bridgeArgs, "--all-namespaces")
	}
	if o.autoscale {
		manifest := strings.ReplaceAll(mustRead(t, filepath.Join(repoRoot, "deploy", "autoscaler", "rbac.yaml")), "namespace: elastic-system", "namespace: "+e.ns)
		manifest = strings.Replace(manifest, "kind: ClusterRoleBinding\nmetadata:\n  name: elastic-autoscaler", "kind: ClusterRoleBinding\nmetadata:\n  name: elastic-autoscaler-"+e.ns, 1)
		e.apply(manifest, "")
		o.bridgeArgs = append(o.bridgeArgs, "--autoscale")
	}
	if o.deletionCost {
		manifest := strings.ReplaceAll(mustRead(t, filepath.Join(repoRoot, "deploy", "autoscaler-deletion-cost", "rbac.yaml")), "namespace: elastic-system", "namespace: "+e.ns)
		manifest = strings.Replace(manifest, "kind: ClusterRoleBinding\nmetadata:\n  name: elastic-autoscaler-deletion-cost", "kind: ClusterRoleBinding\nmetadata:\n  name: elastic-autoscaler-deletion-cost-"+e.ns, 1)
		e.apply(manifest, "")
		o.bridgeArgs = append(o.bridgeArgs, "--autoscale-deletion-cost")
	}
	if o.kueue {
		require.NoError(t, c.StartKueue(t.Context()), "%s", c.Logs("kueue", 30))
		manifest := strings.ReplaceAll(mustRead(t, filepath.Join(repoRoot, "deploy", "kueue", "rbac.yaml")), "namespace: elastic-system", "namespace: "+e.ns)
		manifest = strings.Replace(manifest, "kind: ClusterRoleBinding\nmetadata:\n  name: elastic-kueue", "kind: ClusterRoleBinding\nmetadata:\n  name: elastic-kueue-"+e.ns, 1)
		e.apply(manifest, "")
		o.bridgeArgs = append(o.bridgeArgs, "--kueue")
	}
	if o.reportUnserved {
		manifest := strings.ReplaceAll(mustRead(t, filepath.Join(repoRoot, "deploy", "base", "unserved-rbac.yaml")), "namespace: elastic-system", "namespace: "+e.ns)
		manifest = strings.Replace(manifest, "kind: ClusterRoleBinding\nmetadata:\n  name: elastic-coordinator-unserved", "kind: ClusterRoleBinding\nmetadata:\n  name: elastic-coordinator-unserved-"+e.ns, 1)
		e.apply(manifest, "")
		o.bridgeArgs = append(o.bridgeArgs, "--report-unserved-after", "3s")
	} else {
		o.bridgeArgs = append(o.bridgeArgs, "--report-unserved-after", "0")
	}
	tok, err := c.Client.CoreV1().ServiceAccounts(e.ns).CreateToken(t.Context(), "elastic-coordinator",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	require.NoError(t, err)
	e.kubeconfig = filepath.Join(t.TempDir(), "bridge.kubeconfig")
	require.NoError(t, kubetest.WriteKubeconfig(e.kubeconfig, c.Server, tok.Status.Token))

	etcdFlags := o.etcdFlags
	if etcdFlags == nil {
		etcdFlags = []string{"--etcd-endpoints", e.etcd.Endpoint()}
	}
	args := []string{"serve", "--listen-metrics", "127.0.0.1:0", "--kubernetes", "--namespace", e.ns, "--session-ttl", "2s"}
	if !o.defaultSidecarImage {
		args = append(args, "--sidecar-image", sidecarImage)
	}
	var serveEnv []string
	if o.homeKubeconfig {
		home := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(home, ".kube"), 0o700))
		require.NoError(t, os.Rename(e.kubeconfig, filepath.Join(home, ".kube", "config")))
		e.kubeconfig = filepath.Join(home, ".kube", "config")
		serveEnv = []string{"HOME=" + home, "KUBECONFIG=", "KUBERNETES_SERVICE_HOST="}
	} else {
		args = append(args, "--kubeconfig", e.kubeconfig)
	}
	e.bridge = background(t, serveEnv, append(append(args, etcdFlags...), o.bridgeArgs...)...)
	ttl := o.sidecarTTL
	if ttl == 0 {
		ttl = 5 * time.Second
	}
	if o.injected {
		e.toyDir = t.TempDir()
		e.runner = startInjectedPodRunner(t, c.Client, e.ns, e.toyDir, o.toyEnv, o.realTrainer)
	} else {
		e.runner = startPodRunner(t, c.Client, e.ns, e.etcd.Endpoint(), ttl, o.toyEnv)
	}
	return e
}

// setRole applies deploy/rbac.yaml in the test's namespace, with rules in
// place of its Role's rules unless rules is empty. Applied again, it changes
// what the running bridge may do.
func (e *kubeEnv) setRole(rules string) {
	e.t.Helper()
	rbac, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "base", "rbac.yaml"))
	require.NoError(e.t, err)
	manifest := strings.ReplaceAll(string(rbac), "namespace: elastic-system", "namespace: "+e.ns)
	if rules != "" {
		manifest = replaceRules(manifest, rules)
	}
	e.apply(manifest, "")
}

// rbacRules are the rules of deploy/rbac.yaml's Role, from "rules:" on.
func rbacRules(t *testing.T) string {
	t.Helper()
	rbac, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "base", "rbac.yaml"))
	require.NoError(t, err)
	start := strings.Index(string(rbac), "rules:")
	end := strings.Index(string(rbac)[start:], "---")
	return string(rbac)[start : start+end]
}

// replaceRules swaps the rules of the Role in an RBAC manifest.
func replaceRules(manifest, rules string) string {
	start := strings.Index(manifest, "rules:")
	end := strings.Index(manifest[start:], "---")
	return manifest[:start] + rules + "\n" + manifest[start+end:]
}

// apply applies every object of a YAML stream server-side, into namespace
// ns when it is not empty.
func (e *kubeEnv) apply(manifest, ns string) {
	e.t.Helper()
	applyManifest(e.t, e.c, e.dyn, manifest, ns)
}

func applyManifest(t *testing.T, c *kubetest.Cluster, dyn dynamic.Interface, manifest, ns string) {
	t.Helper()
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			require.NoError(t, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		var mapping *metaMapping
		require.Eventually(t, func() bool {
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				mapper.Reset() // a CRD applied a moment ago
				return false
			}
			mapping = &metaMapping{resource: m.Resource, namespaced: m.Scope.Name() == "namespace"}
			return true
		}, 30*time.Second, 100*time.Millisecond, "no resource for %s", gvk)
		res := dyn.Resource(mapping.resource)
		var ri dynamic.ResourceInterface = res
		if mapping.namespaced {
			if ns != "" {
				obj.SetNamespace(ns)
			}
			ri = res.Namespace(obj.GetNamespace())
		}
		_, err := ri.Apply(t.Context(), obj.GetName(), &obj, metav1.ApplyOptions{FieldManager: "elastic-test", Force: true})
		require.NoError(t, err, "apply %s %s", gvk.Kind, obj.GetName())
	}
}

type metaMapping struct {
	resource   schema.GroupVersionResource
	namespaced bool
}

// statefulSet creates a job's workload of a role with pods that kwok runs.
func (e *kubeEnv) statefulSet(job, role string, replicas int32, podAnnotations map[string]string) *appsv1.StatefulSet {
	e.t.Helper()
	labels := map[string]string{"elastic.job": job, "elastic.role": role}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: job + "-" + role, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			PodManagementPolicy: appsv1.ParallelPodManagement, ServiceName: job,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: podAnnotations},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "trainer"}}},
			},
		},
	}
	sts, err := e.c.Client.AppsV1().StatefulSets(e.ns).Create(e.t.Context(), sts, metav1.CreateOptions{})
	require.NoError(e.t, err)
	return sts
}

// spec stores a job's spec.
func (e *kubeEnv) spec(job string, s membership.Spec) {
	e.t.Helper()
	val, err := membership.Encode(s)
	require.NoError(e.t, err)
	_, err = e.etcd.Client(e.t).Put(e.t.Context(), membership.DefaultKeys().Spec(job), val)
	require.NoError(e.t, err)
}

// status waits for the job's status to satisfy ok.
func (e *kubeEnv) status(job, what string, ok func(membership.Status) bool) membership.Status {
	e.t.Helper()
	var last membership.Status
	require.Eventually(e.t, func() bool {
		s, err := e.client.Status(e.t.Context(), job)
		last = s
		return err == nil && ok(s)
	}, 60*time.Second, 20*time.Millisecond, "job %s never %s; last status %+v\nbridge:\n%s", job, what, &last, e.bridge.out)
	return last
}

// sidecarContainer is a real sidecar process standing in for a pod's
// container.
type sidecarContainer struct{ proc *bgProcess }

func (c sidecarContainer) Stop() { _ = c.proc.cmd.Process.Signal(syscall.SIGTERM) }

// startPodRunner runs a real sidecar process on the host for every Running
// pod of the namespace, with the pod's name, IP and UID, running the toy
// trainer.
func startPodRunner(t *testing.T, kube kubernetes.Interface, ns, endpoint string, ttl time.Duration, toyEnv []string) *kubetest.PodRunner {
	start := func(pod *corev1.Pod) (kubetest.Container, error) {
		env := append([]string{"POD_NAME=" + pod.Name, "POD_NAMESPACE=" + pod.Namespace, "POD_UID=" + string(pod.UID),
			"POD_IP=" + pod.Status.PodIP, "TOY_DIR=" + t.TempDir(),
			// A container's /tmp is its own: two pods of one node id (a
			// StatefulSet's replacement beside a frozen predecessor) never
			// share the sidecar's state there, as they would on this host.
			"ELASTIC_STATE_DIR=" + t.TempDir()}, toyEnv...)
		if pod.Annotations["elastic.intranet"] == "Service" {
			env = append(env, "ELASTIC_INTRANET=Service")
		}
		args := []string{"sidecar", "--etcd-endpoints", endpoint, "--job", pod.Labels["elastic.job"], "--role", pod.Labels["elastic.role"],
			"--ttl", ttl.String(), "--grace-period", "2s", "--", "testdata/toytrainer.sh"}
		return sidecarContainer{proc: background(t, env, args...)}, nil
	}
	r, err := kubetest.StartPodRunner(kube, ns, "elastic.job", start, func(err error) { t.Error(err) })
	require.NoError(t, err)
	t.Cleanup(r.Stop)
	return r
}

// startInjectedPodRunner runs, for every Running pod of the namespace, the
// command the controller injected into its training container — `/elastic/
// coordinator sidecar ... -- CMD` with this test's binary for the one the
// init container would copy — with the container's environment, the
// downward API's fields filled in from the pod.
func startInjectedPodRunner(t *testing.T, kube kubernetes.Interface, ns, checkpoints string, toyEnv []string, real realTrainer) *kubetest.PodRunner {
	emptyDirs := t.TempDir()
	start := func(pod *corev1.Pod) (kubetest.Container, error) {
		for _, c := range pod.Spec.Containers {
			if len(c.Command) < 2 || c.Command[0] != "/elastic/coordinator" {
				continue
			}
			env := append([]string{"TOY_DIR=" + filepath.Join(checkpoints, pod.Labels["elastic.job"])}, toyEnv...)
			mounts, err := secretMounts(t, kube, pod, c)
			if err != nil {
				return nil, err
			}
			// An emptyDir is the pod's own, and outlives its containers.
			for _, m := range c.VolumeMounts {
				for _, v := range pod.Spec.Volumes {
					if v.Name == m.Name && v.EmptyDir != nil {
						mounts[m.MountPath] = filepath.Join(emptyDirs, string(pod.UID), m.Name)
					}
				}
			}
			for _, v := range c.Env {
				value, err := envValue(t, kube, pod, v)
				if err != nil {
					return nil, err
				}
				for at, local := range mounts {
					if value == at || strings.HasPrefix(value, at+"/") {
						value = local + strings.TrimPrefix(value, at)
					}
				}
				env = append(env, v.Name+"="+value)
			}
			// The training command (python, which this machine cannot run
			// as the images would) becomes the toy trainer, which first
			// writes down the environment the sidecar gave it.
			args := append(slices.Clone(c.Command[1:]), c.Args...)
			dash := slices.Index(args, "--")
			if dash < 0 {
				return nil, errors.New("the injected command has no -- before the training command")
			}
			if real != nil {
				dir := filepath.Join(checkpoints, pod.Labels["elastic.job"])
				if command, realEnv, ok := real(args[dash+1:], dir); ok {
					if err := os.MkdirAll(dir, 0o700); err != nil {
						return nil, err
					}
					// The pods' IPs are not this machine's: each node
					// serves its endpoints, and its rendezvous if it is
					// rank 0 (or the first server, or MindSpore's
					// scheduler), on the loopback, at ports of the test's
					// own.
					loopback := []string{"--host", "127.0.0.1", "--port", freePort(t), "--master-port", freePort(t)}
					args = append(append(slices.Clone(args[:dash]), loopback...), append([]string{"--"}, command...)...)
					return sidecarContainer{proc: background(t, append(env, realEnv...), args...)}, nil
				}
			}
			if training := args[dash+1:]; len(training) > 1 && training[0] == "/usr/bin/python3" &&
				strings.HasPrefix(training[1], filepath.Join(repoRoot, "testdata")+"/") {
				// A trainer of testdata/ that runs here as written, with
				// the sidecar's module: testdata/savetrainer.py.
				env = append(env, "SAVE_DIR="+filepath.Join(checkpoints, pod.Labels["elastic.job"]))
				if filepath.Base(training[1]) == "inplace_trainer.py" {
					// It forms a process group across its pods, whose IPs
					// are not this machine's: its node serves the rank-0
					// store on the loopback, at a port of the test's own.
					args = append(slices.Clone(args[:dash]), append([]string{"--host", "127.0.0.1", "--master-port", freePort(t)}, args[dash:]...)...)
				}
				return sidecarContainer{proc: background(t, env, args...)}, nil
			}
			if training := args[dash+1:]; slices.Contains(training, "paddle.distributed.launch") && training[0] == "python" {
				// PaddlePaddle's launcher stays the command, as its stand-in,
				// which starts the toy trainer in place of the image's script.
				// The pods' IPs are not this machine's: the stand-in reaches
				// its master on the loopback, at a port of the test's own.
				args = append(append(slices.Clone(args[:dash]), "--master-port="+freePort(t), "--"), append([]string{standInPython}, training[1:]...)...)
				env = append(env, "PYTHONPATH="+filepath.Join(repoRoot, "testdata", "frameworks", "python"), "STANDIN_LOOPBACK=1",
					"STANDIN_TRAINER="+filepath.Join(repoRoot, "testdata", "frameworks", "toy_trainer.py"))
				return sidecarContainer{proc: background(t, env, args...)}, nil
			}
			args = append(args[:dash+1], "/bin/sh", "-c",
				`mkdir -p "$TOY_DIR" && env >"$TOY_DIR/.env-$POD_NAME" && mv "$TOY_DIR/.env-$POD_NAME" "$TOY_DIR/env-$POD_NAME-$ELASTIC_GENERATION" && exec "$0"`, toyTrainer)
			return sidecarContainer{proc: background(t, env, args...)}, nil
		}
		return nil, errors.New("no container runs /elastic/coordinator: the sidecar was not injected")
	}
	r, err := kubetest.StartPodRunner(kube, ns, "elastic.job", start, func(err error) { t.Error(err) })
	require.NoError(t, err)
	t.Cleanup(r.Stop)
	return r
}

// envValue is a variable's value in a pod, as the kubelet fills it in:
// from the pod's fields or from a Secret.
func envValue(t *testing.T, kube kubernetes.Interface, pod *corev1.Pod, v corev1.EnvVar) (string, error) {
	switch {
	case v.ValueFrom == nil:
		return v.Value, nil
	case v.ValueFrom.SecretKeyRef != nil:
		ref := v.ValueFrom.SecretKeyRef
		s, err := kube.CoreV1().Secrets(pod.Namespace).Get(t.Context(), ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("variable %s: %w", v.Name, err)
		}
		return string(s.Data[ref.Key]), nil
	case v.ValueFrom.FieldRef == nil:
		return "", nil
	}
	switch v.ValueFrom.FieldRef.FieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	}
	return "", nil
}

// secretMounts writes the Secret volumes a container mounts to
// directories on the host, and returns them by mount path.
func secretMounts(t *testing.T, kube kubernetes.Interface, pod *corev1.Pod, c corev1.Container) (map[string]string, error) {
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			s, err := kube.CoreV1().Secrets(pod.Namespace).Get(t.Context(), v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			dir := t.TempDir()
			for k, data := range s.Data {
				if err := os.WriteFile(filepath.Join(dir, k), data, 0o600); err != nil {
					return nil, err
				}
			}
			mounts[m.MountPath] = dir
		}
	}
	return mounts, nil
}

// freeze stops a pod's sidecar in its tracks (SIGSTOP), as a machine that
// dies would: it neither renews nor revokes its lease, and it is not stopped
// when its pod is deleted.
func freeze(t *testing.T, r *kubetest.PodRunner, pod string) {
	t.Helper()
	c, ok := r.Hold(pod)
	require.True(t, ok, "no sidecar for pod %s", pod)
	proc := c.(sidecarContainer).proc
	require.NoError(t, proc.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = proc.cmd.Process.Signal(syscall.SIGCONT) })
}

// killContainer kills a pod's sidecar with SIGKILL, as a container runtime
// would: it neither stops its trainer gracefully nor revokes its lease. The
// pod's record in Kubernetes is left as it was.
func (e *kubeEnv) killContainer(pod string) {
	e.t.Helper()
	c, ok := e.runner.Hold(pod)
	require.True(e.t, ok, "no sidecar for pod %s", pod)
	proc := c.(sidecarContainer).proc
	require.NoError(e.t, proc.cmd.Process.Kill())
	select {
	case <-proc.done:
	case <-time.After(10 * time.Second):
		e.t.Fatalf("the sidecar of pod %s outlived SIGKILL", pod)
	}
}

// reportTerminated writes what the kubelet reports once a pod's containers
// stopped: every container terminated.
func (e *kubeEnv) reportTerminated(pod string) {
	e.t.Helper()
	p, err := e.c.Client.CoreV1().Pods(e.ns).Get(e.t.Context(), pod, metav1.GetOptions{})
	require.NoError(e.t, err)
	now := metav1.Now()
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", FinishedAt: now}},
		})
	}
	_, err = e.c.Client.CoreV1().Pods(e.ns).UpdateStatus(e.t.Context(), p, metav1.UpdateOptions{})
	require.NoError(e.t, err)
}

// events lists the Events of an object.
func (e *kubeEnv) events(name string) []corev1.Event {
	list, err := e.c.Client.CoreV1().Events(e.ns).List(e.t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return nil
	}
	return list.Items
}

func hasEvent(events []corev1.Event, reason, contains string) bool {
	for _, ev := range events {
		if ev.Reason == reason && strings.Contains(ev.Message, contains) {
			return true
		}
	}
	return false
}

func itoa(n int) string     { return strconv.Itoa(n) }
func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func unstructuredInt(obj map[string]any, fields ...string) (int64, bool, error) {
	return unstructured.NestedInt64(obj, fields...)
}

func etcdtestStart(t *testing.T) *etcdtest.Server { return etcdtest.Start(t) }

func clientv3LeaseID(id int64) clientv3.LeaseID { return clientv3.LeaseID(id) }
