//go:build !sidecaronly

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/homedir"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/autoscale"
	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge"
	"github.com/elastictraining/coordinator/operatorbridge/admission"
	"github.com/elastictraining/coordinator/operatorbridge/autoscaler"
	"github.com/elastictraining/coordinator/operatorbridge/controller"
	"github.com/elastictraining/coordinator/operatorbridge/jobcontroller"
	"github.com/elastictraining/coordinator/operatorbridge/unserved"
)

// kubeOptions are the flags of the Kubernetes side of serve.
type kubeOptions struct {
	enabled    bool
	kubeconfig string
	namespace  string
	all        bool
	pod        string // this replica's pod, from POD_NAME
	workloads  []string

	sidecarImage     string
	sidecarEndpoints string
	sidecarSecret    string
	sidecarAuth      bool
	mirrors          []string
	kinds            []string
	unservedAfter    time.Duration

	autoscale          bool
	autoscaleCooldown  time.Duration
	autoscaleMinGain   int
	autoscaleMinGainFr float64
	autoscalePeriod    time.Duration
	autoscaleSettle    time.Duration
	deletionCost       bool
	kueue              bool
}

func (o *kubeOptions) register(fs *pflag.FlagSet, env lookupEnv) {
	fs.BoolVar(&o.enabled, "kubernetes", false, "run the Kubernetes bridge and the ElasticJob controller on the leader")
	fs.StringVar(&o.kubeconfig, "kubeconfig", fromEnv(env, "", "KUBECONFIG"), "kubeconfig of the bridge; if empty, the pod's service account inside a cluster, else ~/.kube/config"+envNote("KUBECONFIG"))
	fs.StringVar(&o.namespace, "namespace", fromEnv(env, "default", "POD_NAMESPACE"),
		"namespace of the jobs, their workloads and pods, and of --sidecar-etcd-secret"+envNote("POD_NAMESPACE"))
	fs.BoolVar(&o.all, "all-namespaces", false, "follow the jobs of every namespace (a ClusterRole: deploy/all-namespaces)")
	fs.StringArrayVar(&o.workloads, "workload-resource", []string{"statefulsets.v1.apps"},
		"resource a job's workloads can be, as RESOURCE.VERSION.GROUP; anything with a scale subresource (repeatable)")
	fs.StringVar(&o.sidecarImage, "sidecar-image", fromEnv(env, "", "ELASTIC_SIDECAR_IMAGE"),
		"image whose binary is injected into the pods of the job resources; if empty, inside a pod the image of its coordinator container, outside one "+
			imageName+":VERSION, the image `make image` tags for this binary's version"+envNote("ELASTIC_SIDECAR_IMAGE"))
	fs.StringVar(&o.sidecarEndpoints, "sidecar-etcd-endpoints", fromEnv(env, "", "ELASTIC_SIDECAR_ETCD_ENDPOINTS"),
		"etcd endpoints the injected sidecars use; --etcd-endpoints if empty"+envNote("ELASTIC_SIDECAR_ETCD_ENDPOINTS"))
	fs.StringVar(&o.sidecarSecret, "sidecar-etcd-secret", fromEnv(env, "", "ELASTIC_SIDECAR_ETCD_SECRET"),
		"Secret (ca.crt, tls.crt, tls.key) with the injected sidecars' etcd client certificate"+envNote("ELASTIC_SIDECAR_ETCD_SECRET"))
	fs.BoolVar(&o.sidecarAuth, "sidecar-etcd-auth", false,
		"give each job's sidecars an etcd user confined to the job's keys, its password in the Secret JOB-etcd (etcd auth on: see --etcd-enable-auth)")
	fs.StringArrayVar(&o.mirrors, "registry-mirror", nil,
		"REGISTRY=MIRROR: read the entrypoint of REGISTRY's images from MIRROR, for containers given without a command (repeatable)")
	fs.StringSliceVar(&o.kinds, "job-kinds", []string{"ElasticJob", "PaddleJob", "MSJob"}, "kinds of job resources to run")
	fs.DurationVar(&o.unservedAfter, "report-unserved-after", unserved.DefaultGrace,
		"say, in a NotServed Event, of a job resource in another namespace that nothing has given a status for this long, that no coordinator serves it (needs deploy/base's ClusterRole elastic-coordinator-unserved; 0: never)")
	fs.BoolVar(&o.autoscale, "autoscale", false,
		"resize elastic jobs (a worker range) to what the cluster can place, making room for pods of a higher priority (needs --kubernetes and read access to nodes and pods: deploy/autoscaler)")
	fs.DurationVar(&o.autoscaleCooldown, "autoscale-cooldown", autoscale.DefaultConfig().Cooldown,
		"how long after a change a job is not grown again: every change restarts the whole job")
	fs.IntVar(&o.autoscaleMinGain, "autoscale-min-gain", autoscale.DefaultConfig().MinGain, "the fewest workers a growth must add")
	fs.Float64Var(&o.autoscaleMinGainFr, "autoscale-min-gain-fraction", autoscale.DefaultConfig().MinGainFraction,
		"the least fraction of a job's size a growth must add")
	fs.DurationVar(&o.autoscalePeriod, "autoscale-period", 30*time.Second, "a pass at least this often; passes follow changes of nodes, pods and jobs")
	fs.DurationVar(&o.autoscaleSettle, "autoscale-settle", time.Second,
		"a growth is carried out once the room it was decided from has not changed for this long (a growth waits 15 s at most, or this if longer; 0: at once), so that a job takes what another workload frees in one step; room for pods of a higher priority is made at once")
	fs.BoolVar(&o.kueue, "kueue", false,
		"run the jobs labelled "+admission.QueueLabel+" as Kueue admits them: a Workload per job, started at the admitted size, stopped and requeued when evicted (needs Kueue's CRDs and deploy/kueue's rules)")
	fs.BoolVar(&o.deletionCost, "autoscale-deletion-cost", false,
		"with --autoscale, set the deletion cost of other workloads' ReplicaSet pods so that their scale-downs free room for whole workers, not holes too small for one (needs patch on pods: deploy/autoscaler-deletion-cost)")
	o.pod = fromEnv(env, "", "POD_NAME")
	o.checkGivenValues(fs)
}

// checkGivenValues has the values given to the bridge's string flags
// checked before serve starts, --kubernetes or not.
func (o *kubeOptions) checkGivenValues(fs *pflag.FlagSet) {
	checkGiven(fs, "kubeconfig", func() error { return checkFile("--kubeconfig", o.kubeconfig) })
	checkGiven(fs, "namespace", func() error { return checkKubeName("--namespace", o.namespace, dns1123Label) })
	checkGiven(fs, "sidecar-etcd-secret", func() error { return checkKubeName("--sidecar-etcd-secret", o.sidecarSecret, dns1123Subdomain) })
	checkGiven(fs, "sidecar-etcd-endpoints", func() error { return checkEndpoints("--sidecar-etcd-endpoints", o.sidecarEndpoints) })
	checkGiven(fs, "sidecar-image", func() error {
		if _, err := name.ParseReference(o.sidecarImage); o.sidecarImage != "" && err != nil {
			return usagef("--sidecar-image %q: want an image reference such as registry.example.com/%s:v1", o.sidecarImage, imageName)
		}
		return nil
	})
	for _, flag := range []string{"workload-resource", "registry-mirror", "job-kinds"} {
		checkGiven(fs, flag, func() error { _, err := o.parse(); return err })
	}
}

// kubeName is a kind of Kubernetes object name: how it is checked, and
// what it is.
type kubeName struct {
	valid func(string) []string
	what  string
}

var (
	dns1123Label     = kubeName{validation.IsDNS1123Label, "a DNS-1123 label (lowercase letters, digits and '-', 63 at most)"}
	dns1123Subdomain = kubeName{validation.IsDNS1123Subdomain, "a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')"}
)

// checkKubeName checks a Kubernetes object's name given to flag; "" is
// none.
func checkKubeName(flag, value string, kind kubeName) error {
	if value != "" && len(kind.valid(value)) > 0 {
		return usagef("%s %q: want %s", flag, value, kind.what)
	}
	return nil
}

// kubeClients are the clients of the Kubernetes side.
type kubeClients struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

func (o *kubeOptions) clients() (kubeClients, error) {
	config, err := o.restConfig()
	if err != nil {
		return kubeClients{}, err
	}
	config.UserAgent = "elastic-coordinator"
	// client-go's default of 5 requests a second, burst 10, would make the
	// bridge wait on itself; these are a controller's usual limits.
	config.QPS, config.Burst = 50, 100
	var c kubeClients
	if c.kube, err = kubernetes.NewForConfig(config); err == nil {
		c.dyn, err = dynamic.NewForConfig(config)
	}
	if err != nil {
		return kubeClients{}, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}

// restConfig finds the cluster the way kubectl does: --kubeconfig (or
// KUBECONFIG), else the pod's service account inside a cluster, else
// ~/.kube/config, so that serve --kubernetes works from a workstation too.
func (o *kubeOptions) restConfig() (*rest.Config, error) {
	path := o.kubeconfig
	if path == "" {
		config, err := rest.InClusterConfig()
		if err == nil {
			return config, nil
		}
		home := filepath.Join(homedir.HomeDir(), clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)
		if _, statErr := os.Stat(home); statErr != nil {
			return nil, fmt.Errorf("no Kubernetes cluster to talk to: not inside a pod (%v) and no %s; give --kubeconfig", err, home)
		}
		path = home
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, errors.Unwrap(err))
	}
	config, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return config, nil
}

// parsedKube are the flags of the Kubernetes side, read.
type parsedKube struct {
	workloads   []schema.GroupVersionResource
	entrypoints *jobcontroller.Entrypoints
	kinds       []jobcontroller.Kind
	autoscale   autoscale.Config
}

// parse reads the flags; one that cannot work is a usage error, said
// before anything connects.
func (o *kubeOptions) parse() (parsedKube, error) {
	p := parsedKube{entrypoints: &jobcontroller.Entrypoints{Mirrors: map[string]string{}}}
	for _, w := range o.workloads {
		gvr, _ := schema.ParseResourceArg(w)
		if gvr == nil || gvr.Version == "" {
			return p, usagef("--workload-resource %q: want RESOURCE.VERSION.GROUP, like statefulsets.v1.apps", w)
		}
		p.workloads = append(p.workloads, *gvr)
	}
	for _, m := range o.mirrors {
		from, to, err := jobcontroller.ParseMirror(m)
		if err != nil {
			return p, usagef("--registry-mirror %v", err)
		}
		p.entrypoints.Mirrors[from] = to
	}
	for _, name := range o.kinds {
		k, ok := jobcontroller.KindNamed(name)
		if !ok {
			return p, usagef("--job-kinds %q: want ElasticJob, PaddleJob or MSJob", name)
		}
		p.kinds = append(p.kinds, k)
	}
	if o.unservedAfter < 0 {
		return p, usagef("--report-unserved-after %s: must not be negative", o.unservedAfter)
	}
	if o.autoscale {
		p.autoscale = autoscale.Config{Cooldown: o.autoscaleCooldown, MinGain: o.autoscaleMinGain, MinGainFraction: o.autoscaleMinGainFr}
		if _, err := autoscale.New(p.autoscale); err != nil {
			return p, usagef("--autoscale-*: %v", err)
		}
		if o.autoscalePeriod <= 0 {
			return p, usagef("--autoscale-period %s: must be positive", o.autoscalePeriod)
		}
		if o.autoscaleSettle < 0 {
			return p, usagef("--autoscale-settle %s: must not be negative", o.autoscaleSettle)
		}
	}
	return p, nil
}

// leaderTasks builds the bridge and the job controller. A flag that cannot
// work is a usage error; a kubeconfig that cannot be read ends serve too.
// The controller alone may be off, with the reason logged:
// the bridge still serves the jobs written as workloads.
func (o *kubeOptions) leaderTasks(ctx context.Context, cli *clientv3.Client, keys membership.Keys, etcdEndpoints string, logger hclog.Logger, reg prometheus.Registerer) ([]coordinator.LeaderTask, error) {
	p, err := o.parse()
	if err != nil {
		return nil, err
	}
	gvrs, entrypoints, kinds := p.workloads, p.entrypoints, p.kinds
	c, err := o.clients()
	if err != nil {
		return nil, err
	}
	jobsNamespace := o.namespace
	if o.all {
		jobsNamespace = "" // every namespace
	}
	clients := controller.Clients{Kube: c.kube, Dynamic: c.dyn, Etcd: cli, Keys: keys, Namespace: jobsNamespace, Logger: logger}
	br, err := operatorbridge.New(operatorbridge.Config{Clients: clients, Workloads: gvrs, Registerer: reg})
	if err != nil {
		return nil, err
	}
	tasks := []coordinator.LeaderTask{br}
	if o.autoscale {
		scaler, err := autoscaler.New(autoscaler.Config{
			Clients: clients, Policy: p.autoscale,
			Period: o.autoscalePeriod, Settle: o.autoscaleSettle, DeletionCost: o.deletionCost, Registerer: reg,
		})
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, scaler)
	}
	if !o.all && o.unservedAfter > 0 {
		var kinds []jobv1.JobKind
		for _, k := range p.kinds {
			kinds = append(kinds, k.JobKind)
		}
		reporter, err := unserved.New(unserved.Config{Clients: clients, Kinds: kinds, Grace: o.unservedAfter, Period: min(o.unservedAfter/2, unserved.DefaultPeriod)})
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, reporter)
	}

	image, err := o.image(ctx, c.kube)
	if err != nil {
		logger.Error("job resources (ElasticJob, PaddleJob, MSJob) not served", "error", err)
		return tasks, nil
	}
	if o.sidecarImage == "" && o.pod == "" {
		logger.Info("no --sidecar-image outside a pod: the job resources' pods get this version's image", "image", image)
	}
	sidecar := jobcontroller.Sidecar{Image: image, EtcdEndpoints: or(o.sidecarEndpoints, etcdEndpoints),
		EtcdSecret: o.sidecarSecret, SecretNamespace: o.namespace, Auth: o.sidecarAuth}
	if keys.Prefix() != membership.DefaultPrefix {
		sidecar.Prefix = keys.Prefix()
	}
	jobs, err := jobcontroller.New(jobcontroller.Config{Clients: clients, Sidecar: sidecar, Kinds: kinds, Entrypoints: entrypoints, Kueue: o.kueue})
	if err != nil {
		return nil, err
	}
	return append(tasks, jobs), nil
}

// imageName is the name of the image `make image` builds (the Makefile's
// IMAGE), tagged with the version.
const imageName = "elastic-coordinator"

// image is the sidecar image: the flag; inside a pod (POD_NAME), the image
// this replica runs; outside one, as from a workstation, the image `make
// image` tags for this binary's version.
func (o *kubeOptions) image(ctx context.Context, kube kubernetes.Interface) (string, error) {
	if o.sidecarImage != "" {
		return o.sidecarImage, nil
	}
	if o.pod == "" {
		return imageName + ":" + releaseTag(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pod, err := kube.CoreV1().Pods(o.namespace).Get(ctx, o.pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("no --sidecar-image, and this replica's pod cannot be read: %w", err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == "coordinator" {
			return c.Image, nil
		}
	}
	return "", fmt.Errorf("no --sidecar-image, and pod %s has no container named coordinator", o.pod)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
