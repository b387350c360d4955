// Command edl reproduces the seed's EDL experiment
// (../shared/reference/edl-experiment.md) on the real control plane: kwok
// with the seed's 133 nodes and 2,348 CPU, the real kube-scheduler placing
// and preempting, the real `coordinator serve --kubernetes` (with
// --autoscale, or without it), ElasticJobs and an nginx Deployment with the
// seed's requests, and a simulated node (the real sidecar agent, an
// in-memory trainer) for every Running pod. Each case runs with no
// autoscaling, with EDL's rule (run by the bench, as documented), and with
// the autoscaler, several passes each, its schedule compressed by a stated
// factor. It writes the seed's tables beside ours and PNG plots like the
// seed's figures.
//
//	go run ./bench/edl -coordinator bin/coordinator -passes 3 -compress 5 -out bench/results
package main
