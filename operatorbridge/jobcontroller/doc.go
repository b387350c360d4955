// Package jobcontroller runs training jobs written as Kubernetes resources
// — ElasticJob (api/v1) — on the coordinator: for each job it writes the
// etcd spec, creates a StatefulSet per role with the sidecar injected and a
// headless Service that governs them, and reports the coordinator's view of
// the job in the resource's status, with Events. Everything it creates is
// owned by the job's resource and goes with it.
//
// It leaves to the bridge (operatorbridge) what the bridge does for any job:
// replicas (np's maximum of workers), the endpoint ConfigMap, the per-pod
// Services of Service mode, evictions and cleanPodPolicy. The resource is
// the job's source of truth: its spec is written to etcd, and a change of
// the etcd spec made elsewhere is undone.
package jobcontroller
