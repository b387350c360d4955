// Command kube measures how fast Kubernetes follows `coordinator scale`
// through the bridge: the time from the scale to every pod of the new size
// Running, and to the ConfigMap <job>-elastic describing the generation of
// that size. Then, for ElasticJobs, what a kubectl user waits for: from the
// create to every trainer running, and from a change of the scale
// subresource to every trainer running at the new size. It runs the real
// control plane of `make kube-tools` with kwok, the real `coordinator serve
// --kubernetes`, and a real sidecar process per Running pod (training
// command: sleep).
//
//	go run ./bench/kube -coordinator bin/coordinator -replicas 4,64 -runs 5 -elasticjob-workers 4 -elasticjob-runs 7
package main
