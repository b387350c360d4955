package controller

import (
	"errors"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/elastictraining/coordinator/membership"
)

// Clients are the configuration every controller of the wing shares: each
// one's Config embeds them.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	Etcd    *clientv3.Client
	// Keys are the etcd schema's; membership.DefaultKeys() if zero.
	Keys membership.Keys
	// Namespace is where the jobs live; "" (metav1.NamespaceAll) is every
	// namespace, with a ClusterRole.
	Namespace string
	// Logger is the controller's; none if nil.
	Logger hclog.Logger
}

// Complete fills the defaults of c and checks that its clients are there;
// each controller's New calls it first.
func (c *Clients) Complete() error {
	if c.Kube == nil || c.Dynamic == nil || c.Etcd == nil {
		return errors.New("kubernetes, dynamic and etcd clients are required")
	}
	if c.Keys == (membership.Keys{}) {
		c.Keys = membership.DefaultKeys()
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return nil
}

// NamespaceName is a namespace for people: "" is every namespace.
func NamespaceName(ns string) string {
	if ns == "" {
		return "(all)"
	}
	return ns
}
