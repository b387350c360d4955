package coordinator

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// goodRecords are a coordinator that never reaches etcd (an actor only
// reads what it is given) and the good records of a running job of two
// nodes: its spec, its plan stored with its table, a node's record.
type goodRecords struct {
	c     *Coordinator
	nodes []membership.LiveNode
	spec  string
	plan  membership.StoredPlan
	node  string
}

func newGoodRecords(tb testing.TB) goodRecords {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}}) // never dialled
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	c, err := New(Config{Client: cli})
	if err != nil {
		tb.Fatal(err)
	}
	r := goodRecords{c: c, nodes: live("n0", "n1")}
	r.spec, _ = membership.Encode(spec("2"))
	if r.plan, err = membership.StorePlan(*runPlan(1, r.nodes), nil, nil, 0); err != nil {
		tb.Fatal(err)
	}
	r.node, _ = membership.Encode(r.nodes[0].Node)
	return r
}

// FuzzJobRecords writes any value over each record of a running job, as
// the actor reads them from etcd: whatever it is, the job keeps a spec and
// a plan (the last good ones, or a new valid value), and a decision is
// made on it without a panic. A value that does not decode is counted
// malformed, never taken.
func FuzzJobRecords(f *testing.F) {
	r := newGoodRecords(f)
	c, keys, nodes, goodSpec, stored, goodNode := r.c, r.c.cfg.Keys, r.nodes, r.spec, r.plan, r.node
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

// TestARelistingKeepsTheLastGoodValues: a watch broken by an etcd election
// lists the job's keys afresh (reset, then the listing). A key the listing
// shows malformed keeps the value the actor held before: the spec, the
// plan, a node's record, an eviction.
func TestARelistingKeepsTheLastGoodValues(t *testing.T) {
	r := newGoodRecords(t)
	c, keys, nodes, goodSpec, stored, goodNode := r.c, r.c.cfg.Keys, r.nodes, r.spec, r.plan, r.node
	eviction, _ := membership.Encode(membership.Eviction{Node: "n1", Lease: 9, TTLSeconds: 5, By: "bridge"})
	listing := func(spec, plan, node, evicted string) []membership.KeyValue {
		kvs := []membership.KeyValue{
			{Key: keys.Spec("job"), Value: []byte(spec), ModRevision: 2},
			{Key: keys.Node("job", "n0"), Value: []byte(node), ModRevision: 3, CreateRevision: 3, Lease: nodes[0].Lease},
			{Key: keys.Eviction("job", "n1", 9), Value: []byte(evicted), ModRevision: 3},
		}
		for i, chunk := range stored.Chunks {
			kvs = append(kvs, membership.KeyValue{Key: keys.TableChunk("job", 1, i), Value: chunk, ModRevision: 4})
		}
		return append(kvs, membership.KeyValue{Key: keys.Plan("job"), Value: []byte(plan), ModRevision: 4})
	}
	a := newJobActor(newTerm(c, "leader", 1), "job")
	a.apply(listing(goodSpec, stored.Record, goodNode, eviction))
	a.reset()
	a.apply(listing("not json {", "{{", "garbage", "garbage"))

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.spec == nil || a.spec.NP != membership.FixedNP(2) {
		t.Errorf("the spec was lost: %+v", a.spec)
	}
	if a.plan == nil || a.plan.Generation != 1 || a.planErr != nil {
		t.Errorf("the plan was lost: %+v, %v", a.plan, a.planErr)
	}
	if _, ok := a.nodes.lookup("n0"); !ok {
		t.Error("the node's last good record was lost")
	}
	if e := a.evictions[evictionID{"n1", 9}]; e.TTLSeconds != 5 || e.By != "bridge" {
		t.Errorf("the eviction was lost: %+v", e)
	}
	if got := len(a.malformed); got != 4 {
		t.Errorf("%d malformed keys, want 4: %v", got, a.malformedSummary())
	}
}
