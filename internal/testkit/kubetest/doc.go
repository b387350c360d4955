// Package kubetest runs a real Kubernetes control plane for tests:
// kube-apiserver on the project's embedded etcd, kube-controller-manager,
// kube-scheduler, and kwok, which makes fake nodes run pods (Running, with
// an IP) without containers. The binaries are built from pinned sources by
// `make kube-tools` into bin/.
package kubetest
