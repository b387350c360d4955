package sidecar

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The hand-written exposition parses as Prometheus's own parser reads it,
// with the values the agent reported.
func TestMetricsAreTheTextFormat(t *testing.T) {
	m := NewMetrics("job-a", `node "1"\`)
	m.Renewal(3*time.Millisecond, nil)
	m.Renewal(500*time.Microsecond, nil)
	m.Renewal(10*time.Second, nil)
	m.Renewal(0, errors.New("etcd unavailable"))
	m.Started(4)
	m.Exited(137)
	m.Started(5)
	m.Fenced()

	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	assert.Equal(t, "text/plain; version=0.0.4; charset=utf-8", rec.Header().Get("Content-Type"))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	require.NoError(t, err, rec.Body.String())

	value := func(name string, labels ...string) float64 {
		t.Helper()
		f := families[name]
		require.NotNil(t, f, name)
	metrics:
		for _, metric := range f.Metric {
			got := map[string]string{}
			for _, l := range metric.Label {
				got[l.GetName()] = l.GetValue()
			}
			assert.Equal(t, "job-a", got["job"])
			assert.Equal(t, `node "1"\`, got["node"])
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			switch {
			case metric.Counter != nil:
				return metric.Counter.GetValue()
			case metric.Gauge != nil:
				return metric.Gauge.GetValue()
			}
		}
		t.Fatalf("no %s%v in\n%s", name, labels, rec.Body.String())
		return 0
	}
	assert.Equal(t, 2.0, value("elastic_sidecar_workload_starts_total"))
	assert.Equal(t, 5.0, value("elastic_sidecar_generation"))
	assert.Equal(t, 1.0, value("elastic_sidecar_fences_total"))
	assert.Equal(t, 3.0, value("elastic_sidecar_lease_renewals_total", "result", "ok"))
	assert.Equal(t, 1.0, value("elastic_sidecar_lease_renewals_total", "result", "error"))
	assert.Equal(t, 1.0, value("elastic_sidecar_workload_exits_total", "code", "137"))
	assert.Equal(t, 0.0, value("elastic_sidecar_workload_exits_total", "code", "0"), "present from the start")

	h := families["elastic_sidecar_lease_renewal_seconds"].Metric[0].Histogram
	require.NotNil(t, h)
	assert.Equal(t, uint64(3), h.GetSampleCount())
	assert.InDelta(t, 10.0035, h.GetSampleSum(), 1e-9)
	cumulative := map[float64]uint64{}
	for _, b := range h.Bucket {
		cumulative[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	assert.Equal(t, uint64(1), cumulative[0.0005], "a bucket's bound is inclusive")
	assert.Equal(t, uint64(1), cumulative[0.002])
	assert.Equal(t, uint64(2), cumulative[0.004])
	assert.Equal(t, uint64(2), cumulative[4.096], "10 s is above the last bound")
}
