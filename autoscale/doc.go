// Package autoscale decides how many workers each elastic training job
// should have, from what the cluster can actually place: a plain policy
// (Policy.Decide) over a snapshot of nodes, pods and jobs, with no
// Kubernetes client in it, so that it is tested, simulated and replayed
// without a cluster. The Kubernetes side (informers, the scale writes,
// Events, metrics) is operatorbridge/autoscaler's.
//
// It follows PaddlePaddle EDL's autoscaler and departs from it where EDL
// fell short: a worker counts only where its whole request fits on one node
// (EDL summed free CPU over the cluster); pending pods of a higher priority
// take precedence and training jobs shrink for them, lowest priority and
// most fulfilled first, never below their minimum (EDL had no priorities);
// a change jumps to its target in one step, held back by a cooldown and a
// minimum gain, because every change restarts the whole job (EDL moved one
// trainer per pass); a job not yet at its minimum is served before others
// grow.
package autoscale
