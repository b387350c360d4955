// Package autoscaler runs the autoscale policy on a Kubernetes cluster:
// a leader task of `coordinator serve --kubernetes --autoscale`. It watches
// nodes and pods through informers and the jobs' records in etcd, turns
// them into an autoscale.Snapshot when something changes (a pod pending, a
// node freed, a job's spec), and carries out the policy's decisions through
// the path a person would use: an ElasticJob's or PaddleJob's scale
// subresource when a resource owns the job (the job controller then writes
// the spec), the spec's target in etcd otherwise. It reports each job in
// etcd (Keys.Autoscaler, shown by `coordinator status`), as Events and as
// Prometheus metrics.
package autoscaler
