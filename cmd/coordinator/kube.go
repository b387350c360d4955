package main

import (
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge"
)

// kubeOptions are the flags of the Kubernetes bridge.
type kubeOptions struct {
	enabled    bool
	kubeconfig string
	namespace  string
	workloads  []string
}

func (o *kubeOptions) register(fs *pflag.FlagSet, env lookupEnv) {
	fs.BoolVar(&o.enabled, "kubernetes", false, "run the Kubernetes bridge on the leader")
	fs.StringVar(&o.kubeconfig, "kubeconfig", fromEnv(env, "", "KUBECONFIG"), "kubeconfig of the bridge; the in-cluster config if empty"+envNote("KUBECONFIG"))
	fs.StringVar(&o.namespace, "namespace", fromEnv(env, "default", "POD_NAMESPACE"), "namespace of the jobs' workloads and pods"+envNote("POD_NAMESPACE"))
	fs.StringArrayVar(&o.workloads, "workload-resource", []string{"statefulsets.v1.apps"},
		"resource a job's workloads can be, as RESOURCE.VERSION.GROUP; anything with a scale subresource (repeatable)")
}

// bridge builds the bridge. A flag that cannot work is a usage error; a
// kubeconfig that cannot be read or reached is an error the caller logs.
func (o *kubeOptions) bridge(cli *clientv3.Client, keys membership.Keys, logger hclog.Logger) (*operatorbridge.Bridge, error) {
	var gvrs []schema.GroupVersionResource
	for _, w := range o.workloads {
		gvr, _ := schema.ParseResourceArg(w)
		if gvr == nil || gvr.Version == "" {
			return nil, usagef("--workload-resource %q: want RESOURCE.VERSION.GROUP, like statefulsets.v1.apps", w)
		}
		gvrs = append(gvrs, *gvr)
	}
	var config *rest.Config
	var err error
	if o.kubeconfig != "" {
		config, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		config, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	config.UserAgent = "elastic-coordinator"
	// client-go's default of 5 requests a second, burst 10, would make the
	// bridge wait on itself; these are a controller's usual limits.
	config.QPS, config.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return operatorbridge.New(operatorbridge.Config{
		Kube: kube, Dynamic: dyn, Etcd: cli, Keys: keys, Namespace: o.namespace, Workloads: gvrs, Logger: logger,
	})
}
