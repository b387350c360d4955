// Package controller is the plumbing that the Kubernetes wing's leader
// tasks share — the bridge, the job controller and the autoscaler — so that
// each holds only what it does: its informers, its reconcile, its metrics.
//
// It takes controller-runtime's shape and keeps it small. Clients are the
// configuration the three share, embedded in each Config. A Term is one
// leadership term: it records Events, holds a rate-limited workqueue of keys
// that one worker drains through an idempotent Reconcile(ctx, key), follows
// the jobs' records in etcd (Records), and stops its goroutines in order when
// the lead ends. Informers, WatchErrors and OnObject are the small pieces
// every controller's informers use.
//
// It is not a framework: a controller with no queue (the autoscaler decides
// in passes over the whole cluster) uses the term and leaves the queue out.
package controller
