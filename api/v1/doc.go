// Package v1 is the ElasticJob resource (elastictraining.io/v1): a training
// job on Kubernetes in one short object — its roles, each a pod template
// with a replica count, and the job's fault-tolerance policies. `coordinator
// serve --kubernetes` runs it; deploy/base/elasticjob-crd.yaml is its schema.
//
// The types are plain structs read from and written to the API server as
// unstructured objects, so that the project needs no generated code.
//
// It is also the Kubernetes wing's shared vocabulary (operatorbridge/...):
// the labels and annotations that tie workloads and pods to a job, the job
// kinds served (ElasticJob, PaddleJob, MSJob) and the owner a job's etcd
// spec names.
// Constants, types and small pure helpers only.
package v1
