package coordinator

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/elastictraining/coordinator/membership"
)

// goodputCollector exports the accounts of the jobs this replica leads,
// read at each scrape: elastic_job_goodput_ratio and
// elastic_job_lost_seconds_total{cause}. A job's series go when the
// replica stops leading it, as its gauges do.
type goodputCollector struct {
	ratio, lost *prometheus.Desc
	now         func() time.Time

	mu       sync.Mutex
	accounts map[string]*membership.Goodput
}

var _ prometheus.Collector = (*goodputCollector)(nil)

func newGoodputCollector(now func() time.Time) *goodputCollector {
	return &goodputCollector{
		ratio: prometheus.NewDesc("elastic_job_goodput_ratio",
			"The share of the job's wall time that trained: training seconds (net of steps trained again) over wall seconds, over the job's life.",
			[]string{"job"}, nil),
		lost: prometheus.NewDesc("elastic_job_lost_seconds_total",
			"Seconds of the job's wall time that did not train, by cause: starting, restarting, waiting, hung, redone, suspended.",
			[]string{"job", "cause"}, nil),
		now: now, accounts: map[string]*membership.Goodput{},
	}
}

// set keeps a copy of the job's account; nil forgets it.
func (c *goodputCollector) set(job string, g *membership.Goodput) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g == nil {
		delete(c.accounts, job)
		return
	}
	c.accounts[job] = g.Clone()
}

// Describe implements prometheus.Collector.
func (c *goodputCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ratio
	ch <- c.lost
}

// Collect implements prometheus.Collector.
func (c *goodputCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for job, g := range c.accounts {
		acc := g.At(now)
		if r := acc.Total.Ratio(); r >= 0 {
			ch <- prometheus.MustNewConstMetric(c.ratio, prometheus.GaugeValue, r, job)
		}
		for _, cause := range membership.LostCauses {
			ch <- prometheus.MustNewConstMetric(c.lost, prometheus.CounterValue, acc.Total.Of(cause), job, string(cause))
		}
	}
}
