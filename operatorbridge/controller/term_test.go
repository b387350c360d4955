package controller_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge/controller"
)

// clients are a controller's, with an etcd client of etcd (none if nil)
// and Kubernetes clients of an API server that no test reaches: the terms
// here record no Event and start no informer.
func clients(t *testing.T, etcd *clientv3.Client) controller.Clients {
	config := &rest.Config{Host: "http://127.0.0.1:1"}
	kube, err := kubernetes.NewForConfig(config)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(config)
	require.NoError(t, err)
	c := controller.Clients{Kube: kube, Dynamic: dyn, Etcd: etcd}
	if etcd == nil {
		c.Etcd = &clientv3.Client{}
	}
	require.NoError(t, c.Complete())
	return c
}

func TestCompleteWantsEveryClient(t *testing.T) {
	c := clients(t, nil)
	assert.Equal(t, membership.DefaultKeys(), c.Keys)
	assert.NotNil(t, c.Logger)
	c.Dynamic = nil
	assert.EqualError(t, c.Complete(), "kubernetes, dynamic and etcd clients are required")
}

// reconciler answers each key's first reconcile as told, and later ones
// with success.
type reconciler struct {
	first map[string]func() (controller.Result, error)

	mu   sync.Mutex
	seen map[string]int
	done chan string
}

func (r *reconciler) Reconcile(_ context.Context, key string) (controller.Result, error) {
	r.mu.Lock()
	r.seen[key]++
	n := r.seen[key]
	r.mu.Unlock()
	r.done <- key
	if n == 1 && r.first[key] != nil {
		return r.first[key]()
	}
	return controller.Result{}, nil
}

func TestTheWorkerRetriesWhatAReconcileAsks(t *testing.T) {
	broken := errors.New("api server down")
	r := &reconciler{
		first: map[string]func() (controller.Result, error){
			"failed":  func() (controller.Result, error) { return controller.Result{}, broken },
			"waiting": func() (controller.Result, error) { return controller.Result{Requeue: true}, nil },
			"later":   func() (controller.Result, error) { return controller.Result{RequeueAfter: 10 * time.Millisecond}, nil },
		},
		seen: map[string]int{},
		done: make(chan string, 16),
	}
	ctx, cancel := context.WithCancel(t.Context())
	term := controller.StartTerm(ctx, clients(t, nil), "test")
	defer term.Stop()
	term.NewQueue("test", workqueue.DefaultTypedControllerRateLimiter[string]())
	var failures []string
	ran := make(chan error, 1)
	go func() {
		ran <- term.Run(ctx, r, func(key string, err error) {
			assert.ErrorIs(t, err, broken)
			failures = append(failures, key)
		})
	}()
	for _, key := range []string{"failed", "waiting", "later", "fine"} {
		term.Queue.Add(key)
	}
	want := map[string]int{"failed": 2, "waiting": 2, "later": 2, "fine": 1}
	got := map[string]int{}
	for n := 0; n < 7; n++ {
		got[<-r.done]++
	}
	assert.Equal(t, want, got)
	cancel()
	require.NoError(t, <-ran)
	assert.Equal(t, []string{"failed"}, failures, "only a failure is said")
	assert.Equal(t, 0, term.Queue.Len())
	term.Stop() // twice is safe
}

func TestTermFollowsTheJobsRecords(t *testing.T) {
	etcd := etcdtest.Start(t).Client(t)
	c := clients(t, etcd)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	term := controller.StartTerm(ctx, c, "test")
	defer term.Stop()
	records := &controller.Records{Kinds: []membership.KeyKind{membership.KindSpec, membership.KindStatus},
		Drop: func(j *membership.JobRecords) bool { return j.Spec == nil && j.Status == nil }}
	updates := make(chan controller.Update, 16)
	term.Follow(ctx, records, func(u controller.Update) { updates <- u })
	next := func() controller.Update {
		for {
			if u := <-updates; len(u.Changes) > 0 {
				return u
			}
		}
	}

	put := func(key string, record any) {
		val, err := membership.Encode(record)
		require.NoError(t, err)
		_, err = etcd.Put(t.Context(), key, val)
		require.NoError(t, err)
	}
	spec := membership.DefaultSpec(membership.FixedNP(2))
	spec.Owner = "ElasticJob/ns/train/uid-1"
	put(c.Keys.Plan("train"), membership.Plan{Generation: 1}) // not followed
	put(c.Keys.Spec("train"), spec)
	u := next()
	require.Len(t, u.Changes, 1)
	assert.Equal(t, "train", u.Changes[0].Job)
	assert.Nil(t, u.Changes[0].Before)
	require.NotNil(t, u.Changes[0].After)
	assert.Equal(t, spec.Owner, u.Changes[0].After.Owner)
	rec, ok := records.Get("train")
	require.True(t, ok)
	assert.Nil(t, rec.Plan, "a plan is not among the kinds followed")

	moved := spec
	moved.Owner = "ElasticJob/ns/train/uid-2"
	put(c.Keys.Spec("train"), moved)
	u = next()
	require.Len(t, u.Changes, 1)
	assert.Equal(t, spec.Owner, u.Changes[0].Before.Owner)
	assert.Equal(t, moved.Owner, u.Changes[0].After.Owner)

	_, err := etcd.Delete(t.Context(), c.Keys.Spec("train"))
	require.NoError(t, err)
	u = next()
	require.Len(t, u.Changes, 1)
	assert.Equal(t, moved.Owner, u.Changes[0].Before.Owner)
	assert.Nil(t, u.Changes[0].After)
	_, ok = records.Get("train")
	assert.False(t, ok, "Drop forgets a job left with neither spec nor status")
	n := 0
	records.Each(func(string, *membership.JobRecords) { n++ })
	assert.Zero(t, n)
	cancel()
	term.Wait()
}
