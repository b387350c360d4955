package sidecar

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is an Observer that exports what an agent does to Prometheus,
// labelled with the job and the node.
type Metrics struct {
	starts      prometheus.Counter
	exits       *prometheus.CounterVec
	renewals    *prometheus.CounterVec
	renewalTime prometheus.Histogram
	fences      prometheus.Counter
	generation  prometheus.Gauge
}

var _ Observer = (*Metrics)(nil)

// NewMetrics registers an agent's metrics for job and node with reg.
func NewMetrics(reg prometheus.Registerer, job, node string) (*Metrics, error) {
	labels := prometheus.Labels{"job": job, "node": node}
	m := &Metrics{
		starts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elastic_sidecar_workload_starts_total", Help: "Times the node's training processes were started, once a generation.", ConstLabels: labels,
		}),
		exits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elastic_sidecar_workload_exits_total", Help: "Times the node's training processes exited on their own, by exit code (0: success).", ConstLabels: labels,
		}, []string{"code"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elastic_sidecar_lease_renewals_total", Help: "Lease renewals sent to etcd, by result (ok or error).", ConstLabels: labels,
		}, []string{"result"}),
		renewalTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "elastic_sidecar_lease_renewal_seconds", Help: "Time etcd took to answer a lease renewal.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		fences: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elastic_sidecar_fences_total", Help: "Times the node lost its lease and killed its training processes.", ConstLabels: labels,
		}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "elastic_sidecar_generation", Help: "The generation the node's training processes last started in.", ConstLabels: labels,
		}),
	}
	for _, c := range []prometheus.Collector{m.starts, m.exits, m.renewals, m.renewalTime, m.fences, m.generation} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{"ok", "error"} {
		m.renewals.WithLabelValues(r) // present from the start
	}
	m.exits.WithLabelValues("0")
	return m, nil
}

// Renewal implements Observer.
func (m *Metrics) Renewal(latency time.Duration, err error) {
	if err != nil {
		m.renewals.WithLabelValues("error").Inc()
		return
	}
	m.renewals.WithLabelValues("ok").Inc()
	m.renewalTime.Observe(latency.Seconds())
}

// Fenced implements Observer.
func (m *Metrics) Fenced() { m.fences.Inc() }

// Started implements Observer.
func (m *Metrics) Started(generation int64) {
	m.starts.Inc()
	m.generation.Set(float64(generation))
}

// Exited implements Observer.
func (m *Metrics) Exited(code int) { m.exits.WithLabelValues(strconv.Itoa(code)).Inc() }
