// Package localrun is `coordinator run`: a whole elastic job on one machine.
// It runs an embedded etcd, a coordinator, and one sidecar process per node
// the job's np asks for; it follows `coordinator scale` by starting and
// stopping local nodes, as the Kubernetes bridge scales pods, and starts a
// node again when its sidecar dies, as a pod with restartPolicy Always.
package localrun
