package controller

import (
	"context"
	"fmt"
	"sort"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Informers are a term's informer factories over the clients' namespace
// (every namespace for ""), typed and dynamic, each listing only the
// objects that its label selector selects ("" for all). They start and
// stop together.
type Informers struct {
	Typed   informers.SharedInformerFactory
	Dynamic dynamicinformer.DynamicSharedInformerFactory
	stop    chan struct{}
}

// NewInformers makes the factories; add informers, then Start.
func NewInformers(c Clients, typedSelector, dynamicSelector string) *Informers {
	selecting := func(selector string) func(*metav1.ListOptions) {
		return func(o *metav1.ListOptions) { o.LabelSelector = selector }
	}
	return &Informers{
		Typed: informers.NewSharedInformerFactoryWithOptions(c.Kube, 0, informers.WithNamespace(c.Namespace),
			informers.WithTweakListOptions(selecting(typedSelector))),
		Dynamic: dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.Dynamic, 0, c.Namespace, selecting(dynamicSelector)),
		stop:    make(chan struct{}),
	}
}

// Start starts the informers added so far.
func (i *Informers) Start() {
	i.Typed.Start(i.stop)
	i.Dynamic.Start(i.stop)
}

// Stop stops the informers and waits for them.
func (i *Informers) Stop() {
	close(i.stop)
	i.Typed.Shutdown()
	i.Dynamic.Shutdown()
}

// OnObject is an informer's event handler that calls f with the object of
// every add, update and delete: for a delete the informer missed, the
// object's last state it knew.
func OnObject(f func(metav1.Object)) cache.ResourceEventHandlerFuncs {
	call := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			f(m)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: call, UpdateFunc: func(_, obj any) { call(obj) }, DeleteFunc: call}
}

// WatchErrors keep the last list or watch error of each resource, so that
// an informer that keeps failing is said once, not at every retry, and its
// error can be reported.
type WatchErrors struct {
	// Namespace is the informers' namespace, for the messages.
	Namespace string

	mu   sync.Mutex
	last map[string]string // by resource
}

// Handler is the watch error handler of a resource's informer. It keeps
// the error, and calls changed with it, under the lock, when it is not the
// last one said.
func (w *WatchErrors) Handler(resource string, changed func(err error)) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		msg := fmt.Sprintf("cannot list or watch %s in namespace %s: %v", resource, NamespaceName(w.Namespace), err)
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.last == nil {
			w.last = map[string]string{}
		}
		if w.last[resource] != msg {
			changed(err)
		}
		w.last[resource] = msg
	}
}

// First is the last error of the first resource by name that had one, or
// "" if none had.
func (w *WatchErrors) First() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	resources := make([]string, 0, len(w.last))
	for r := range w.last {
		resources = append(resources, r)
	}
	sort.Strings(resources)
	if len(resources) == 0 {
		return ""
	}
	return w.last[resources[0]]
}
