package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
	"github.com/elastictraining/coordinator/membership"
)

// promtool is Prometheus's own checker, built by `make test` (the
// prometheus module's cmd/promtool) into bin/.
func promtool(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	path := filepath.Join(kubetest.BinDir(), "promtool")
	_, err := os.Stat(path)
	require.NoError(t, err, "promtool missing: run `make tools`")
	cmd := exec.Command(path, args...)
	cmd.Dir = repoRoot
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %v:\n%s", args, out)
	return string(out)
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	var body []byte
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err = io.ReadAll(resp.Body)
		return err == nil && resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond)
	return string(body)
}

// TestTheAlertRulesAreValidAndFire: promtool checks the rules, and its
// unit tests (deploy/monitoring/alerts_test.yaml) make each alert fire
// where it should and not where it should not.
func TestTheAlertRulesAreValidAndFire(t *testing.T) {
	t.Parallel()
	assert.Contains(t, promtool(t, "", "check", "rules", "deploy/monitoring/alerts.yaml"), "SUCCESS: 10 rules found")
	assert.Contains(t, promtool(t, "", "test", "rules", "deploy/monitoring/alerts_test.yaml"), "SUCCESS")
}

// TestMetricsPassPromtoolAndTheDashboardAndAlertsUseThem: the metrics of
// a real serve and a real sidecar pass `promtool check metrics`; a job's
// series carry its name; every expression of the Grafana dashboard is
// valid PromQL (promtool checks it as a recording rule) and every metric
// the dashboard and the alerts name is one the code exports.
func TestMetricsPassPromtoolAndTheDashboardAndAlertsUseThem(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	serveAddr, sidecarAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	background(t, nil, "serve", "--etcd-endpoints", srv.Endpoint(), "--listen-metrics", serveAddr)
	// The trainer steps as a shell trainer does, with `coordinator beat`:
	// its rank's step time is exported too.
	stepping := `step=0; while :; do step=$((step + 1)); "$ELASTIC_COORDINATOR" beat --step "$step"; sleep 0.1; done`
	background(t, nil,
		"sidecar", "--etcd-endpoints", srv.Endpoint(), "--job", "mon", "--np", "1", "--host", "127.0.0.1",
		"--port", freePort(t), "--master-port", freePort(t), "--listen-metrics", sidecarAddr, "--", "sh", "-c", stepping)
	stepTime := regexp.MustCompile(`(?m)^elastic_rank_step_seconds\{job="mon",node="[^"]+",rank="0"\} (\S+)$`)
	var serveMetrics, sidecarMetrics string
	require.Eventually(t, func() bool {
		serveMetrics, sidecarMetrics = scrape(t, serveAddr), scrape(t, sidecarAddr)
		return strings.Contains(serveMetrics, `elastic_job_phase{job="mon",phase="Running"} 1`) &&
			strings.Contains(sidecarMetrics, `elastic_sidecar_lease_renewals_total{job="mon",node=`) &&
			stepTime.MatchString(sidecarMetrics)
	}, 60*time.Second, 100*time.Millisecond, "the job runs and steps, and both report it")
	seconds, err := strconv.ParseFloat(stepTime.FindStringSubmatch(sidecarMetrics)[1], 64)
	require.NoError(t, err)
	assert.Positive(t, seconds, "rank 0's step time")
	for _, series := range []string{
		`elastic_job_restarts_total{job="mon"} 0`, `elastic_job_world_size{job="mon"} 1`, `elastic_job_np_max{job="mon"} 1`,
		`elastic_job_step_seconds_count{job="mon",step="total"} 1`, `elastic_job_generation{job="mon"} 1`,
	} {
		assert.Contains(t, serveMetrics, series)
	}
	assert.Regexp(t, `elastic_sidecar_workload_starts_total\{job="mon",node="[^"]+"\} 1`, sidecarMetrics)
	for name, text := range map[string]string{"serve": serveMetrics, "sidecar": sidecarMetrics} {
		out := promtool(t, text, "check", "metrics")
		assert.NotContains(t, out, "elastic_", "promtool finds nothing to say of %s's metrics:\n%s", name, out)
	}

	exported := map[string]bool{}
	for _, text := range []string{serveMetrics, sidecarMetrics} {
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (elastic_\w+) `).FindAllStringSubmatch(text, -1) {
			exported[m[1]] = true
		}
	}
	// The bridge's and the autoscaler's are exported with --kubernetes
	// only: they are looked for in their code.
	for _, file := range []string{"operatorbridge/metrics.go", "operatorbridge/autoscaler/metrics.go"} {
		src, err := os.ReadFile(filepath.Join(repoRoot, file))
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`Name: "(elastic_\w+)"`).FindAllStringSubmatch(string(src), -1) {
			exported[m[1]] = true
		}
	}
	known := func(t *testing.T, where, expr string) {
		for _, name := range regexp.MustCompile(`elastic_\w+`).FindAllString(expr, -1) {
			base := regexp.MustCompile(`_(bucket|count|sum)$`).ReplaceAllString(name, "")
			assert.True(t, exported[name] || exported[base], "%s: %s is not a metric the code exports", where, name)
		}
	}

	var dash struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct{ Name string } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy/monitoring/grafana-dashboard.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &dash), "the dashboard is JSON")
	assert.Equal(t, "elastic-training", dash.UID)
	var variables []string
	for _, v := range dash.Templating.List {
		variables = append(variables, v.Name)
	}
	assert.Equal(t, []string{"datasource", "job"}, variables)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	ids, exprs := map[int]bool{}, 0
	for _, p := range dash.Panels {
		assert.False(t, ids[p.ID], "panel id %d is unique", p.ID)
		ids[p.ID] = true
		if p.Type != "row" {
			assert.NotEmpty(t, p.Targets, "panel %q queries something", p.Title)
		}
		for _, target := range p.Targets {
			known(t, "dashboard panel "+p.Title, target.Expr)
			// Grafana's variables, as a query would have them.
			expr := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*").Replace(target.Expr)
			exprs++
			fmt.Fprintf(&rules, "      - record: dashboard:expr_%d\n        expr: %q\n", exprs, expr)
		}
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	require.NoError(t, os.WriteFile(file, []byte(rules.String()), 0o600))
	assert.Contains(t, promtool(t, "", "check", "rules", file), fmt.Sprintf("SUCCESS: %d rules found", exprs), "every panel's query is valid PromQL")

	alerts, err := os.ReadFile(filepath.Join(repoRoot, "deploy/monitoring/alerts.yaml"))
	require.NoError(t, err)
	for _, m := range regexp.MustCompile(`(?m)expr: (.*(?:\n {10,}.*)*)`).FindAllStringSubmatch(string(alerts), -1) {
		known(t, "alert rule", m[1])
	}
}

// monitoredMetrics are the metrics deploy/monitoring's dashboard and alert
// rules name, but for those of the Kubernetes side (the bridge's and the
// autoscaler's, which serve exports with --kubernetes only).
func monitoredMetrics(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, file := range []string{"deploy/monitoring/grafana-dashboard.json", "deploy/monitoring/alerts.yaml"} {
		data, err := os.ReadFile(filepath.Join(repoRoot, file))
		require.NoError(t, err)
		for _, name := range regexp.MustCompile(`elastic_\w+`).FindAllString(string(data), -1) {
			name = regexp.MustCompile(`_(bucket|count|sum)$`).ReplaceAllString(name, "")
			if !strings.HasPrefix(name, "elastic_bridge_") && !strings.HasPrefix(name, "elastic_autoscaler_") {
				seen[name] = true
			}
		}
	}
	var out []string
	for name := range seen {
		out = append(out, name)
	}
	return out
}

// A job on one machine is monitored as one on a cluster: `run
// --listen-metrics` serves the job's series (the coordinator's) and its
// nodes' (each sidecar's, read at the scrape) on one address, which pass
// `promtool check metrics`, and every metric the dashboard and the alert
// rules name (but the Kubernetes side's) is there, as is the job's page.
func TestRunServesTheJobsAndItsNodesMetrics(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + freePort(t)
	stepping := `step=0; while :; do step=$((step + 1)); "$ELASTIC_COORDINATOR" beat --step "$step"; sleep 0.1; done`
	r := startRun(t, []string{"--np", "2", "--job", "mon", "--listen-metrics", addr}, []string{"sh", "-c", stepping})
	r.status("mon", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	stepTime := regexp.MustCompile(`(?m)^elastic_rank_step_seconds\{job="mon",node="mon-1",rank="1"\} (\S+)$`)
	var text string
	require.Eventually(t, func() bool {
		text = scrape(t, addr)
		return strings.Contains(text, `elastic_job_phase{job="mon",phase="Running"} 1`) &&
			strings.Contains(text, `elastic_job_goodput_ratio{job="mon"}`) &&
			strings.Contains(text, `elastic_sidecar_lease_renewals_total{job="mon",node="mon-0",`) &&
			strings.Contains(text, `elastic_sidecar_lease_renewals_total{job="mon",node="mon-1",`) &&
			stepTime.MatchString(text)
	}, 60*time.Second, 100*time.Millisecond, "the job runs and steps, and run's metrics say it of the job and both nodes")
	out := promtool(t, text, "check", "metrics")
	assert.NotContains(t, out, "elastic_", "promtool finds nothing to say of run's metrics:\n%s", out)
	for _, name := range monitoredMetrics(t) {
		assert.Contains(t, text, "# TYPE "+name+" ", "%s, which the dashboard or an alert names, is served", name)
	}
	assert.Contains(t, r.out.String(), "coordinator run: metrics of the job and its nodes on http://"+addr+"/metrics")

	resp, err := http.Get("http://" + addr + "/jobs/mon")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the job's page")
}
