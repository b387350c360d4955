package coordinator

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// FuzzJobRecords writes any value over each record of a running job, as
// the actor reads them from etcd: whatever it is, the job keeps a spec and
// a plan (the last good ones, or a new valid value), and a decision is
// made on it without a panic. A value that does not decode is counted
// malformed, never taken.
func FuzzJobRecords(f *testing.F) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}}) // never dialled: the actor only reads
	if err != nil {
		f.Fatal(err)
	}
	defer cli.Close()
	c, err := New(Config{Client: cli})
	if err != nil {
		f.Fatal(err)
	}
	keys := c.cfg.Keys
	nodes := live("n0", "n1")
	goodSpec, _ := membership.Encode(spec("2"))
	stored, err := membership.StorePlan(*runPlan(1, nodes), nil, nil, 0)
	if err != nil {
		f.Fatal(err)
	}
	goodNode, _ := membership.Encode(nodes[0].Node)
	targets := []string{
		keys.Spec("job"), keys.Plan("job"), keys.Status("job"), keys.Node("job", "n0"),
		keys.Eviction("job", "n0", 1), keys.Takeover("job", "n0", 1), keys.TableChunk("job", 1, 0), keys.Event("job", 7),
	}
	for i := range targets {
		f.Add(uint8(i), []byte("not json {"))
		f.Add(uint8(i), []byte(`{"np":"-3"}`))
		f.Add(uint8(i), []byte(`{"generation":"two"}`))
	}
	f.Add(uint8(0), []byte(`{"np":"5:2"}`))
	f.Add(uint8(0), []byte(`{"np":"3"}`))
	f.Fuzz(func(t *testing.T, target uint8, value []byte) {
		a := newJobActor(newTerm(c, "leader", 1), "job")
		changes := []membership.KeyValue{
			{Key: keys.Spec("job"), Value: []byte(goodSpec), ModRevision: 2},
			{Key: keys.Node("job", "n0"), Value: []byte(goodNode), ModRevision: 3, CreateRevision: 3, Lease: nodes[0].Lease},
		}
		for i, chunk := range stored.Chunks {
			changes = append(changes, membership.KeyValue{Key: keys.TableChunk("job", 1, i), Value: chunk, ModRevision: 4})
		}
		changes = append(changes, membership.KeyValue{Key: keys.Plan("job"), Value: []byte(stored.Record), ModRevision: 4})
		a.apply(changes)
		a.apply([]membership.KeyValue{{Key: targets[int(target)%len(targets)], Value: value, ModRevision: 10, Lease: nodes[0].Lease}})

		a.mu.Lock()
		defer a.mu.Unlock()
		if a.spec == nil {
			t.Fatal("the job lost its spec")
		}
		if a.plan == nil {
			t.Fatal("the job lost its plan")
		}
		if err := a.spec.Validate(); err != nil {
			t.Fatalf("an invalid spec was taken: %v", err)
		}
		v := a.viewLocked()
		_ = decide(v, memo{}, limits{settle: time.Second, stopTimeout: time.Second, retention: time.Hour}, time.Now())
	})
}
