package operatorbridge

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the bridge's, registered once and kept across terms.
type metrics struct {
	scales    *prometheus.CounterVec
	problems  *prometheus.GaugeVec
	evictions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		scales: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "elastic_bridge_scales_total",
			Help: "Changes of a job's workload replicas through the scale subresource, by result (ok, error: a refused or failed update, RBAC among them)."},
			[]string{"job", "result"}),
		problems: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "elastic_bridge_job_problem",
			Help: "1 while the bridge reports a problem with the job (no workload, a scale refused, RBAC): see coordinator status."}, []string{"job"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "elastic_bridge_evictions_total",
			Help: "Nodes evicted because their pod failed or was deleted."}, []string{"job"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.scales, m.problems, m.evictions} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register bridge metrics: %w", err)
		}
	}
	return m, nil
}

// seen makes a job's series exist from the start, at zero.
func (m *metrics) seen(job string) {
	m.scales.WithLabelValues(job, "ok")
	m.scales.WithLabelValues(job, "error")
	m.problems.WithLabelValues(job)
	m.evictions.WithLabelValues(job)
}

// forget drops a job's series: the job is gone.
func (m *metrics) forget(job string) {
	m.scales.DeletePartialMatch(prometheus.Labels{"job": job})
	m.problems.DeleteLabelValues(job)
	m.evictions.DeleteLabelValues(job)
}
