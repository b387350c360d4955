// Package operatorbridge is the Kubernetes side of the project (the job
// controller, the autoscaler's shell, the CRDs and their shared controller
// helper live beneath it). At its root is the bridge, which makes
// Kubernetes follow the coordinator. It finds a job's workloads by label
// (api/v1's elastic.job, elastic.role), sets their replicas through the
// scale subresource when the job's np changes, writes the ConfigMap <job>-elastic with the endpoints of every committed
// generation, keeps a headless Service per pod in Service mode, evicts a
// node at once when its pod is deleted or fails, and applies cleanPodPolicy
// when the job ends.
//
// It reads the coordinator's published records from etcd like any client;
// it writes only its own report (Keys.Bridge) and the evictions of nodes
// whose pods are gone (presence.Evict: a revoked lease, and a record
// unless Kubernetes says the pod's containers stopped).
package operatorbridge
