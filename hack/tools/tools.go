// Command tools exists to pin the Kubernetes components and kubectl in
// go.mod; the Makefile builds each one with `go build k8s.io/kubernetes/cmd/...`.
package main

import (
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {}
