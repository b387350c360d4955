package sidecar

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Metrics is an Observer that exports what an agent does in Prometheus's
// text format, labelled with the job and the node. It writes the format
// itself rather than linking Prometheus's client library, which would add
// 1.4 MB to the memory every training pod pays for its sidecar; the
// integration tests check its output with promtool.
type Metrics struct {
	labels string // job="…",node="…"

	mu          sync.Mutex
	starts      uint64
	exits       map[int]uint64
	renewalsOK  uint64
	renewalsErr uint64
	renewalTime histogram
	fences      uint64
	generation  int64
	hangs       uint64
	// stepTimes are the median recent step intervals of the node's ranks
	// in the running generation, by global rank.
	stepTimes map[int]float64
}

var (
	_ Observer     = (*Metrics)(nil)
	_ http.Handler = (*Metrics)(nil)
)

// renewalBuckets are the upper bounds of the renewal latency histogram:
// 0.5 ms doubling to 4 s.
var renewalBuckets = func() []float64 {
	b := make([]float64, 14)
	for i, v := 0, 0.0005; i < len(b); i, v = i+1, v*2 {
		b[i] = v
	}
	return b
}()

// NewMetrics returns an agent's metrics for job and node, every series
// present from the start.
func NewMetrics(job, node string) *Metrics {
	return &Metrics{
		labels:      fmt.Sprintf(`job="%s",node="%s"`, escapeLabel(job), escapeLabel(node)),
		exits:       map[int]uint64{0: 0},
		stepTimes:   map[int]float64{},
		renewalTime: histogram{counts: make([]uint64, len(renewalBuckets))},
	}
}

// Renewal implements Observer.
func (m *Metrics) Renewal(latency time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.renewalsErr++
		return
	}
	m.renewalsOK++
	m.renewalTime.observe(latency.Seconds())
}

// Fenced implements Observer.
func (m *Metrics) Fenced() {
	m.mu.Lock()
	m.fences++
	m.mu.Unlock()
}

// Started implements Observer.
func (m *Metrics) Started(generation int64) {
	m.mu.Lock()
	m.starts++
	m.generation = generation
	clear(m.stepTimes) // the ranks are the new generation's
	m.mu.Unlock()
}

// StepTime implements Observer.
func (m *Metrics) StepTime(rank int, d time.Duration) {
	m.mu.Lock()
	m.stepTimes[rank] = d.Seconds()
	m.mu.Unlock()
}

// Hung implements Observer.
func (m *Metrics) Hung() {
	m.mu.Lock()
	m.hangs++
	m.mu.Unlock()
}

// Exited implements Observer.
func (m *Metrics) Exited(code int) {
	m.mu.Lock()
	m.exits[code]++
	m.mu.Unlock()
}

// ServeHTTP serves the metrics in the text exposition format 0.0.4.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = m.Write(w)
}

// Write writes the metrics in the text exposition format.
func (m *Metrics) Write(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := bufio.NewWriter(w)
	family := func(name, kind, help string) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
	}
	sample := func(name, extra string, value float64) {
		labels := m.labels
		if extra != "" {
			labels += "," + extra
		}
		fmt.Fprintf(b, "%s{%s} %s\n", name, labels, formatValue(value))
	}

	family("elastic_sidecar_fences_total", "counter", "Times the node lost its lease and killed its training processes.")
	sample("elastic_sidecar_fences_total", "", float64(m.fences))
	family("elastic_sidecar_generation", "gauge", "The generation the node's training processes last started in.")
	sample("elastic_sidecar_generation", "", float64(m.generation))

	family("elastic_sidecar_hangs_total", "counter", "Times one of the node's ranks made no progress for its hang timeout, or was stopped.")
	sample("elastic_sidecar_hangs_total", "", float64(m.hangs))
	family("elastic_rank_step_seconds", "gauge", "Median of a rank's recent step intervals in the running generation, by global rank: a straggler shows here before it hangs.")
	for _, rank := range slices.Sorted(maps.Keys(m.stepTimes)) {
		sample("elastic_rank_step_seconds", `rank="`+strconv.Itoa(rank)+`"`, m.stepTimes[rank])
	}

	const renewalTime = "elastic_sidecar_lease_renewal_seconds"
	family(renewalTime, "histogram", "Time etcd took to answer a lease renewal.")
	cumulative := uint64(0)
	for i, bound := range renewalBuckets {
		cumulative += m.renewalTime.counts[i]
		sample(renewalTime+"_bucket", `le="`+formatValue(bound)+`"`, float64(cumulative))
	}
	sample(renewalTime+"_bucket", `le="+Inf"`, float64(m.renewalTime.count))
	sample(renewalTime+"_sum", "", m.renewalTime.sum)
	sample(renewalTime+"_count", "", float64(m.renewalTime.count))

	family("elastic_sidecar_lease_renewals_total", "counter", "Lease renewals sent to etcd, by result (ok or error).")
	sample("elastic_sidecar_lease_renewals_total", `result="error"`, float64(m.renewalsErr))
	sample("elastic_sidecar_lease_renewals_total", `result="ok"`, float64(m.renewalsOK))

	family("elastic_sidecar_workload_exits_total", "counter", "Times the node's training processes exited on their own, by exit code (0: success).")
	for _, code := range slices.Sorted(maps.Keys(m.exits)) {
		sample("elastic_sidecar_workload_exits_total", `code="`+strconv.Itoa(code)+`"`, float64(m.exits[code]))
	}
	family("elastic_sidecar_workload_starts_total", "counter", "Times the node's training processes were started, once a generation.")
	sample("elastic_sidecar_workload_starts_total", "", float64(m.starts))
	return b.Flush()
}

// histogram counts observations per bucket (not cumulative).
type histogram struct {
	counts []uint64
	count  uint64
	sum    float64
}

func (h *histogram) observe(v float64) {
	h.count++
	h.sum += v
	if i, _ := slices.BinarySearch(renewalBuckets, v); i < len(h.counts) {
		h.counts[i]++
	}
}

// escapeLabel escapes a label value as the text format wants.
func escapeLabel(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

// formatValue writes a number as Prometheus's own client does.
func formatValue(v float64) string {
	return strconv.FormatFloat(v, 'g', -1, 64)
}
