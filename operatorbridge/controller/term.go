package controller

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// reconcileTimeout bounds one Reconcile.
const reconcileTimeout = 30 * time.Second

// Term is one leadership term of a controller: what it holds while its
// replica leads, and the goroutines that end with the lead. Lead starts one
// with StartTerm and defers Stop.
type Term struct {
	// Recorder records Events on the objects of the clients' namespace.
	Recorder record.EventRecorder
	// Queue holds the keys to reconcile; nil until NewQueue.
	Queue workqueue.TypedRateLimitingInterface[string]

	clients     Clients
	broadcaster record.EventBroadcaster
	wg          sync.WaitGroup
	stopEvents  sync.Once
}

// StartTerm starts a term of a controller configured with c: its Events
// go to the namespace's (every namespace's, for ""), from component.
func StartTerm(ctx context.Context, c Clients, component string) *Term {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.Kube.CoreV1().Events(c.Namespace)})
	return &Term{
		Recorder:    broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component}),
		clients:     c,
		broadcaster: broadcaster,
	}
}

// NewQueue gives the term its workqueue of keys: name names it in
// client-go's workqueue metrics, and limiter spaces the retries of a key.
func (t *Term) NewQueue(name string, limiter workqueue.TypedRateLimiter[string]) {
	t.Queue = workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

// RetryLimiter spaces the retries of a key that failed: from 5 ms,
// doubling, to 30 s at most, so that a job whose dependency was down (etcd,
// the API server) is served again within 30 s of its coming back, with no
// one touching it (client-go's default waits up to 1000 s); and 10 keys a
// second overall, bursts of 100.
func RetryLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 30*time.Second),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// Go runs f in a goroutine that the term waits for. f must return once the
// term's context ends.
func (t *Term) Go(f func()) { t.wg.Go(f) }

// Wait waits for the term's goroutines.
func (t *Term) Wait() { t.wg.Wait() }

// Stop ends the term: it shuts the queue down, waits for the term's
// goroutines and stops recording Events. It is safe to call twice.
func (t *Term) Stop() {
	if t.Queue != nil {
		t.Queue.ShutDown()
	}
	t.wg.Wait()
	t.stopEvents.Do(t.broadcaster.Shutdown)
}

// Reconciler converges the object of one key to what is observed, as
// controller-runtime's does. It must be idempotent: a key is queued again
// at every change, and may be reconciled for a change already seen.
type Reconciler interface {
	Reconcile(ctx context.Context, key string) (Result, error)
}

// Result says when to reconcile a key again other than after a failure.
type Result struct {
	// Requeue reconciles the key again with the queue's backoff: it could
	// not be looked at yet (a cache not filled).
	Requeue bool
	// RequeueAfter, if positive, reconciles the key again after it, with
	// no backoff: nothing watched will say when it is worth it.
	RequeueAfter time.Duration
}

// Run runs the worker, which reconciles the queue's keys one at a time,
// each within 30 s. A failure is handed to failed, to be said, and its key
// is retried with the queue's backoff; nothing is retried once ctx ended.
// Run returns when ctx ends, once the term's goroutines have stopped.
func (t *Term) Run(ctx context.Context, r Reconciler, failed func(key string, err error)) error {
	t.Go(func() {
		for t.processNext(ctx, r, failed) {
		}
	})
	<-ctx.Done()
	t.Queue.ShutDown()
	t.wg.Wait()
	return nil
}

// processNext reconciles one key; false once the queue is shut down.
func (t *Term) processNext(ctx context.Context, r Reconciler, failed func(string, error)) bool {
	key, quit := t.Queue.Get()
	if quit {
		return false
	}
	defer t.Queue.Done(key)
	reconcileCtx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	res, err := r.Reconcile(reconcileCtx, key)
	switch {
	case ctx.Err() != nil:
		// The term is over: the next one starts afresh.
		t.Queue.Forget(key)
	case err != nil:
		failed(key, err)
		t.Queue.AddRateLimited(key)
	case res.Requeue:
		t.Queue.AddRateLimited(key)
	case res.RequeueAfter > 0:
		t.Queue.Forget(key)
		t.Queue.AddAfter(key, res.RequeueAfter)
	default:
		t.Queue.Forget(key)
	}
	return true
}
