package coordinator

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/elastictraining/coordinator/membership"
)

// metrics are the coordinator's Prometheus instruments.
type metrics struct {
	leader      prometheus.Gauge
	writes      prometheus.Counter
	generations *prometheus.CounterVec
	restarts    *prometheus.CounterVec
	members     *prometheus.GaugeVec
	steps       *prometheus.HistogramVec
	invalid     prometheus.Counter
	leaseLosses *prometheus.CounterVec
	evictions   *prometheus.CounterVec
	unacked     *prometheus.GaugeVec
	writeFails  prometheus.Counter
	commitTime  prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "elastic_coordinator_leader", Help: "1 while this replica is the leader.",
		}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elastic_coordinator_etcd_writes_total", Help: "Write requests (transactions, lease grants and revokes) sent to etcd.",
		}),
		generations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elastic_job_generations_total", Help: "Generations committed in phase run.",
		}, []string{"job"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elastic_job_restarts_total", Help: "Restarts that spent the job's restart budget.",
		}, []string{"job"}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "elastic_job_members", Help: "Members of the job's current generation.",
		}, []string{"job"}),
		steps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "elastic_job_step_seconds",
			Help:    "Duration of each protocol step of a generation: detect, stop, wait, start, total.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"step"}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elastic_coordinator_invalid_records_total", Help: "Malformed records read from etcd.",
		}),
		leaseLosses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elastic_node_lease_losses_total", Help: "Times a node's sidecar lost its lease and fenced itself, as the nodes report it.",
		}, []string{"job"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elastic_job_evictions_total", Help: "Nodes the coordinator evicted for not acking a stop within the stop timeout of the last ack.",
		}, []string{"job"}),
		unacked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "elastic_job_unacked_members", Help: "Members of the job's stop phase that have not acked it yet.",
		}, []string{"job"}),
		writeFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elastic_coordinator_etcd_write_failures_total", Help: "Decisions whose writes etcd failed or refused; each is retried after a backoff.",
		}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "elastic_coordinator_commit_seconds",
			Help:    "Time etcd took to commit a decision's transaction: an etcd too slow for the jobs shows here.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.leader, m.writes, m.generations, m.restarts, m.members, m.steps, m.invalid, m.leaseLosses, m.evictions, m.unacked, m.writeFails, m.commitTime} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observeSteps(s *membership.Steps) {
	for step, d := range map[string]membership.Duration{
		"detect": s.Detect, "stop": s.Stop, "wait": s.Wait, "start": s.Start, "total": s.Total,
	} {
		m.steps.WithLabelValues(step).Observe(float64(d) / 1e9)
	}
}
