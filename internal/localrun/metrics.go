package localrun

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/jobpages"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// run's metrics: what `serve` exports of the jobs it leads (the
// coordinator's elastic_job_* series), and what each local sidecar exports
// of its node (elastic_sidecar_*, elastic_rank_*), read from the sidecars
// at each scrape, on one address, so that a Prometheus that scrapes it, and
// deploy/monitoring's dashboard and alerts, see a job on one machine as
// they see one on a cluster. The job's pages are there too.

// sidecarScrapeTimeout bounds the read of one sidecar's metrics at a
// scrape: a sidecar that is starting or frozen costs the scrape its series,
// not the scrape.
const sidecarScrapeTimeout = 2 * time.Second

// sidecarMetrics gathers the local sidecars' metrics, each from its own
// address.
type sidecarMetrics struct {
	client *http.Client
	mu     sync.Mutex
	addrs  map[string]string // by node id
}

var _ prometheus.Gatherer = (*sidecarMetrics)(nil)

func newSidecarMetrics() *sidecarMetrics {
	return &sidecarMetrics{client: &http.Client{Timeout: sidecarScrapeTimeout}, addrs: map[string]string{}}
}

// set says where node's sidecar serves its metrics; "" forgets it.
func (s *sidecarMetrics) set(node, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if addr == "" {
		delete(s.addrs, node)
		return
	}
	s.addrs[node] = addr
}

// Gather implements prometheus.Gatherer: every sidecar's families, read
// concurrently; a sidecar that does not answer is left out.
func (s *sidecarMetrics) Gather() ([]*dto.MetricFamily, error) {
	s.mu.Lock()
	addrs := make([]string, 0, len(s.addrs))
	for _, a := range s.addrs {
		addrs = append(addrs, a)
	}
	s.mu.Unlock()
	results := make([][]*dto.MetricFamily, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { results[i] = s.read(addr) })
	}
	wg.Wait()
	var out []*dto.MetricFamily
	for _, r := range results {
		out = append(out, r...)
	}
	return out, nil
}

// read is one sidecar's families; none if it cannot be read.
func (s *sidecarMetrics) read(addr string) []*dto.MetricFamily {
	resp, err := s.client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil
	}
	out := make([]*dto.MetricFamily, 0, len(families))
	for _, f := range families {
		out = append(out, f)
	}
	return out
}

// metricsServer serves /metrics (the coordinator's registry and the
// sidecars'), /healthz, /readyz and the job's pages on a listener.
type metricsServer struct {
	srv  *http.Server
	done chan error
}

// serveMetrics serves on l until stop.
func serveMetrics(l net.Listener, reg *prometheus.Registry, sidecars *sidecarMetrics, cli *clientv3.Client, keys membership.Keys, logger hclog.Logger) *metricsServer {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	gather := prometheus.Gatherers{reg, sidecars}
	mux.Handle("/metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	pages := jobpages.Handler(jobclient.New(cli, keys))
	mux.Handle("/jobs", pages)
	mux.Handle("/jobs/", pages)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/jobs", http.StatusFound) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if _, err := cli.Get(ctx, keys.Prefix(), clientv3.WithCountOnly(), clientv3.WithLimit(1)); err != nil {
			http.Error(w, "etcd: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	m := &metricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, done: make(chan error, 1)}
	go func() { m.done <- m.srv.Serve(l) }()
	logger.Info("serving metrics", "address", "http://"+l.Addr().String()+"/metrics")
	return m
}

// stop shuts the server down and waits for it.
func (m *metricsServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
	<-m.done
}
