package autoscaler

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the autoscaler's, registered once and kept across terms.
type metrics struct {
	utilization prometheus.Gauge
	pending     prometheus.Gauge
	target      *prometheus.GaugeVec
	desired     *prometheus.GaugeVec
	decisions   *prometheus.CounterVec
	passes      prometheus.Counter
	failures    prometheus.Counter
	costs       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		utilization: prometheus.NewGauge(prometheus.GaugeOpts{Name: "elastic_autoscaler_cpu_utilization",
			Help: "CPU requests of Running pods divided by the allocatable CPU of the nodes that take pods, as the autoscaler sees them"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "elastic_autoscaler_pending_pods",
			Help: "pending pods that are not elastic jobs' workers"}),
		target: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "elastic_autoscaler_job_target_workers",
			Help: "workers the autoscaler gave the job"}, []string{"job"}),
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "elastic_autoscaler_job_desired_workers",
			Help: "workers that would fit the job now, before the cooldown and the minimum gain"}, []string{"job"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "elastic_autoscaler_decisions_total",
			Help: "changes of a job's target carried out, by job and direction (grow, shrink)"}, []string{"job", "direction"}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{Name: "elastic_autoscaler_passes_total",
			Help: "passes of the policy"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "elastic_autoscaler_write_failures_total",
			Help: "decisions that could not be carried out (retried at the next pass)"}),
		costs: prometheus.NewCounter(prometheus.CounterOpts{Name: "elastic_autoscaler_deletion_cost_patches_total",
			Help: "pods of other workloads' ReplicaSets given a deletion cost (--autoscale-deletion-cost)"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.utilization, m.pending, m.target, m.desired, m.decisions, m.passes, m.failures, m.costs} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register autoscaler metrics: %w", err)
		}
	}
	return m, nil
}
