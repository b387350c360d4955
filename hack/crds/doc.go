// Command crds renders the CRDs of kube/crds into deploy/.
package main
