package coordinator

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/elastictraining/coordinator/membership"
)

// phases are the values of elastic_job_phase's phase label.
var phases = []membership.JobPhase{membership.JobWaiting, membership.JobRestarting, membership.JobRunning, membership.JobSuspended, membership.JobSucceeded, membership.JobFailed}

// steps are the values of elastic_job_step_seconds's step label: the
// protocol's steps, and the whole restart.
var steps = []string{"detect", "stop", "wait", "start", "total"}

// metrics are the coordinator's Prometheus instruments. A job's series
// exist, at zero, from the moment the leader sees the job, and its gauges
// go when the leader stops leading or the job is deleted: a dashboard
// summing over replicas counts each job once.
type metrics struct {
	leader      prometheus.Gauge
	writes      prometheus.Counter
	invalid     prometheus.Counter
	writeFails  prometheus.Counter
	commitTime  prometheus.Histogram
	generations *prometheus.CounterVec
	restarts    *prometheus.CounterVec
	leaseLosses *prometheus.CounterVec
	evictions   *prometheus.CounterVec
	steps       *prometheus.HistogramVec

	// Gauges of a job's state, from its status.
	phase        *prometheus.GaugeVec
	members      *prometheus.GaugeVec
	ready        *prometheus.GaugeVec
	worldSize    *prometheus.GaugeVec
	generation   *prometheus.GaugeVec
	npMin, npMax *prometheus.GaugeVec
	spent        *prometheus.GaugeVec
	budget       *prometheus.GaugeVec
	unacked      *prometheus.GaugeVec
	// hangSpent and hangBudget are the hang budget's, as spent and budget
	// are the failures'.
	hangSpent, hangBudget *prometheus.GaugeVec
	malformed             *prometheus.GaugeVec
	// goodput are the jobs' accounts, read at each scrape.
	goodput *goodputCollector
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	jobGauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"job"})
	}
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "elastic_coordinator_leader", Help: "1 while this replica is the leader.",
		}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elastic_coordinator_etcd_writes_total", Help: "Write requests (transactions, lease grants and revokes) sent to etcd.",
		}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elastic_coordinator_invalid_records_total", Help: "Malformed records read from etcd.",
		}),
		malformed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "elastic_malformed_records", Help: "The job's records that do not decode or are invalid, by kind; the last good value of each stands meanwhile.",
		}, []string{"job", "kind"}),
		writeFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elastic_coordinator_etcd_write_failures_total", Help: "Decisions whose writes etcd failed or refused; each is retried after a backoff.",
		}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "elastic_coordinator_commit_seconds",
			Help:    "Time etcd took to commit a decision's transaction: an etcd too slow for the jobs shows here.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		generations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elastic_job_generations_total", Help: "Generations committed in phase run.",
		}, []string{"job"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elastic_job_restarts_total", Help: "Restarts that spent the job's restart budget.",
		}, []string{"job"}),
		leaseLosses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elastic_node_lease_losses_total", Help: "Times a node's sidecar lost its lease and fenced itself, as the nodes report it.",
		}, []string{"job"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elastic_job_evictions_total", Help: "Nodes the coordinator evicted for not acking a stop within the stop timeout of the last ack.",
		}, []string{"job"}),
		steps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "elastic_job_step_seconds",
			Help:    "Duration of each protocol step of a restart (detect, stop, wait, start) and of the whole restart (total), from the change seen to every member running.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"job", "step"}),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "elastic_job_phase", Help: "The job's phase, as a state set: 1 for the phase it is in, 0 for the others.",
		}, []string{"job", "phase"}),
		members:    jobGauge("elastic_job_members", "Members (nodes) of the job's current generation."),
		ready:      jobGauge("elastic_job_ready_members", "Members running or done; while waiting, the live workers; 0 while restarting."),
		worldSize:  jobGauge("elastic_job_world_size", "Worker processes of the current generation."),
		generation: jobGauge("elastic_job_generation", "The job's current generation."),
		npMin:      jobGauge("elastic_job_np_min", "The least worker nodes the job runs with (np's minimum)."),
		npMax:      jobGauge("elastic_job_np_max", "The most worker nodes the job runs with (np's maximum, or the autoscaler's target)."),
		spent:      jobGauge("elastic_job_restart_budget_spent", "Restarts the job has spent on failures."),
		budget:     jobGauge("elastic_job_restart_budget", "Restarts the job may spend on failures (its max restarts)."),
		unacked:    jobGauge("elastic_job_unacked_members", "Members of the job's stop phase that have not acked it yet."),
		hangSpent:  jobGauge("elastic_job_hang_restarts", "Restarts the job has spent on hung ranks (a rank that made no progress for its hang timeout, or was stopped)."),
		hangBudget: jobGauge("elastic_job_hang_restart_budget", "Restarts the job may spend on hung ranks (its max hang restarts)."),
		goodput:    newGoodputCollector(time.Now),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.leader, m.writes, m.invalid, m.writeFails, m.commitTime, m.generations, m.restarts,
		m.leaseLosses, m.evictions, m.steps, m.phase, m.members, m.ready, m.worldSize, m.generation, m.npMin, m.npMax,
		m.spent, m.budget, m.unacked, m.malformed, m.hangSpent, m.hangBudget, m.goodput} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// seen makes a job's counters and histograms exist at zero, so that a
// rate or an alert over them works before the first restart.
func (m *metrics) seen(job string) {
	for _, c := range []*prometheus.CounterVec{m.generations, m.restarts, m.leaseLosses, m.evictions} {
		c.WithLabelValues(job)
	}
	for _, s := range steps {
		m.steps.WithLabelValues(job, s)
	}
}

// observeStatus sets a job's gauges from its status and spec.
func (m *metrics) observeStatus(job string, st *membership.Status, spec *membership.Spec) {
	if st != nil {
		for _, p := range phases {
			v := 0.0
			if st.Phase == p {
				v = 1
			}
			m.phase.WithLabelValues(job, string(p)).Set(v)
		}
		m.members.WithLabelValues(job).Set(float64(st.Members))
		m.ready.WithLabelValues(job).Set(float64(st.Ready))
		m.worldSize.WithLabelValues(job).Set(float64(st.WorldSize))
		m.generation.WithLabelValues(job).Set(float64(st.Generation))
		m.spent.WithLabelValues(job).Set(float64(st.Restarts))
		m.hangSpent.WithLabelValues(job).Set(float64(st.HangRestarts))
	}
	if spec != nil {
		np := spec.Workers()
		m.npMin.WithLabelValues(job).Set(float64(np.Min))
		m.npMax.WithLabelValues(job).Set(float64(np.Max))
		m.budget.WithLabelValues(job).Set(float64(spec.MaxRestarts))
		m.hangBudget.WithLabelValues(job).Set(float64(spec.MaxHangRestarts))
	}
}

// forgetGauges drops a job's gauges: this replica no longer knows its
// state (it lost the lead), or the job is gone.
func (m *metrics) forgetGauges(job string) {
	for _, g := range []*prometheus.GaugeVec{m.phase, m.members, m.ready, m.worldSize, m.generation, m.npMin, m.npMax, m.spent, m.budget, m.unacked, m.malformed,
		m.hangSpent, m.hangBudget} {
		g.DeletePartialMatch(prometheus.Labels{"job": job})
	}
	m.goodput.set(job, nil)
}

// forget drops every series of a job that was deleted.
func (m *metrics) forget(job string) {
	m.forgetGauges(job)
	for _, c := range []*prometheus.CounterVec{m.generations, m.restarts, m.leaseLosses, m.evictions} {
		c.DeleteLabelValues(job)
	}
	m.steps.DeletePartialMatch(prometheus.Labels{"job": job})
}

// malformedKinds are the values of elastic_malformed_records' kind label:
// every record a coordinator decodes.
var malformedKinds = []membership.KeyKind{membership.KindSpec, membership.KindPlan, membership.KindStatus, membership.KindNode,
	membership.KindEviction, membership.KindTakeover, membership.KindTable, membership.KindBridge, membership.KindAutoscaler}

// observeMalformed sets how many of a job's records of each kind are
// malformed now.
func (m *metrics) observeMalformed(job string, counts map[membership.KeyKind]int) {
	for _, k := range malformedKinds {
		m.malformed.WithLabelValues(job, k.String()).Set(float64(counts[k]))
	}
}

func (m *metrics) observeSteps(job string, s *membership.Steps) {
	for step, d := range map[string]membership.Duration{
		"detect": s.Detect, "stop": s.Stop, "wait": s.Wait, "start": s.Start, "total": s.Total,
	} {
		m.steps.WithLabelValues(job, step).Observe(float64(d) / 1e9)
	}
}
