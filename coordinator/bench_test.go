package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/internal/testkit/simnode"
	"github.com/elastictraining/coordinator/membership"
)

// BenchmarkJoinToPlanCommitted measures, for a job of np simulated nodes on
// embedded etcd, the time from the last node's registration to the
// coordinator's phase run being seen by a watcher of the plan: the
// coordinator's own part, not the time to every node running, which
// `make bench-scale` measures. Each iteration the last node leaves (the
// others stop and wait) and joins again.
//
// Reported besides ns/op (the mean):
//   - p50-ms, p90-ms: the median and 90th percentile of the iterations;
//   - coordinator-writes/change: etcd writes of the coordinator per
//     membership change (the leave and the join are one change each);
//   - etcd-writes/change: every write to etcd, sidecar acks included.
func BenchmarkJoinToPlanCommitted(b *testing.B) {
	for _, np := range []int{8, 256, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", np), func(b *testing.B) { benchJoinToPlanCommitted(b, np) })
	}
}

func benchJoinToPlanCommitted(b *testing.B, np int) {
	h := newHarness(b)
	h.nodeTTL = 10 * time.Second // fewer renewals to share the machine with
	reg := prometheus.NewRegistry()
	h.startCoordinator("c1", func(c *coordinator.Config) { c.Registerer = reg })
	h.scale("job", strconv.Itoa(np))

	// The first np-1 nodes share a handful of clients, as pods on a few
	// etcd proxies would.
	clients := make([]*clientv3.Client, 8)
	for i := range clients {
		clients[i] = h.srv.Client(b)
	}
	for i := range np - 1 {
		n, err := simnode.Launch(simnode.Config{Client: clients[i%len(clients)], Keys: h.keys, Job: "job",
			ID: fmt.Sprintf("n%04d", i), TTL: h.nodeTTL})
		require.NoError(b, err)
		b.Cleanup(n.Leave)
	}
	waiting := func(gen int64) {
		h.waitStatus("job", fmt.Sprintf("Waiting with %d nodes", np-1), func(s membership.Status) bool {
			return s.Phase == membership.JobWaiting && s.Ready == np-1 && s.Generation >= gen
		})
	}
	waiting(0)

	plans := h.cli.Watch(b.Context(), h.keys.Plan("job"))
	last := simnode.Config{Client: h.cli, Keys: h.keys, Job: "job", ID: "last", TTL: h.nodeTTL}
	var writes, revisions float64
	var took []time.Duration
	firstRev := revision(b, h)
	for b.Loop() {
		before := metricValue(b, reg, "elastic_coordinator_etcd_writes_total")
		start := time.Now()
		n, err := simnode.Launch(last)
		require.NoError(b, err)
		gen := awaitRun(b, plans)
		took = append(took, time.Since(start))
		b.StopTimer()

		h.waitRunning("job", np, gen-1)
		n.Leave()
		waiting(gen + 1)
		writes += metricValue(b, reg, "elastic_coordinator_etcd_writes_total") - before
		b.StartTimer()
	}
	revisions = float64(revision(b, h) - firstRev)
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*9/10].Microseconds())/1000, "p90-ms")
	b.ReportMetric(writes/float64(2*b.N), "coordinator-writes/change")
	b.ReportMetric(revisions/float64(2*b.N), "etcd-writes/change")
}

// awaitRun waits for the plan to enter phase run and returns its generation.
func awaitRun(b *testing.B, plans clientv3.WatchChan) int64 {
	timeout := time.After(60 * time.Second)
	for {
		select {
		case resp := <-plans:
			for _, ev := range resp.Events {
				p, err := membership.DecodePlan(ev.Kv.Value)
				require.NoError(b, err)
				if p.Phase == membership.PhaseRun {
					return p.Generation
				}
			}
		case <-timeout:
			b.Fatal("no run phase within a minute")
		}
	}
}

func revision(b *testing.B, h *harness) int64 {
	resp, err := h.cli.Get(context.Background(), "/")
	require.NoError(b, err)
	return resp.Header.Revision
}
