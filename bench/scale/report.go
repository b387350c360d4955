package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/elastictraining/coordinator/bench/internal/stats"
)

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func mb(b float64) string { return fmt.Sprintf("%.1f MB", b/1e6) }

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func (r result) row() string {
	if r.failed != "" {
		return fmt.Sprintf("| %s | failed: %s |||||||||||| %s | |", r.size.label, r.failed, r.size.ttl)
	}
	all := make([]string, len(r.losses))
	for i, d := range r.losses {
		all[i] = fmt.Sprintf("%.2f", d.Seconds())
	}
	return fmt.Sprintf("| %s | %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s | %s | %.0f | %d | %s | %.0f/s, %.0f%% |",
		r.size.label, secs(r.register), secs(r.join), secs(stats.Median(r.losses)), strings.Join(all, ", "), secs(r.scale),
		secs(stats.Median(r.lossCPU)), secs(stats.Median(r.lossEtcdCPU)), mb(medianOf(r.lossSent)), mb(medianOf(r.lossWAL)),
		mb(float64(r.peakRSS)), mb(r.dbAtEnd), r.evictions, r.restarts, r.size.ttl, r.renewalsPerSec, 100*r.idleCPU)
}

func reportText(results []result, losses, procs, clients int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# bench-scale\n\n")
	fmt.Fprintf(&b, "`make bench-scale` on %s: real `coordinator etcd` (fsync on) and `coordinator serve` processes and N+1 sidecar agents (one standby) for a job of np N, in %d agent processes of %d etcd clients each, all on this machine.\n\n", time.Now().UTC().Format("2006-01-02"), procs, clients)
	fmt.Fprintf(&b, "* **join → all running**: every node started at once, to the last of the N members running generation 1 (registered: to every node's lease and record written).\n")
	fmt.Fprintf(&b, "* **loss → all running**: a member's sidecar gone and its lease revoked (as the Kubernetes bridge does for a failed pod), to the last of the N members running the next generation, the standby in its place; median of %d, then each.\n", losses)
	fmt.Fprintf(&b, "* **scale → all running**: `coordinator scale --np N+1` started, to the last of the N+1 running.\n")
	fmt.Fprintf(&b, "* Per loss (median), from the revocation to 2 s after every member runs (the running acks): CPU time of the coordinator and of etcd; bytes etcd sent to its clients (watch events, ranges, lease and write responses: an upper bound of the watch bytes); bytes written to etcd's WAL.\n")
	fmt.Fprintf(&b, "* Coordinator RSS is its peak; db is etcd's database size at the end; evictions are the coordinator's (every node was healthy: each is false); sidecar restarts are sidecars that could not register (etcd too slow) and were started again, as a pod's container is; renewals and etcd CPU are measured over 5 s with the job running and nothing changing.\n\n")
	b.WriteString("| nodes | registered | join → all running | loss → all running | scale → all running | coordinator CPU / loss | etcd CPU / loss | etcd sent / loss | etcd WAL / loss | coordinator RSS | etcd db | evictions | sidecar restarts | TTL | renewals, etcd CPU idle |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		b.WriteString(r.row() + "\n")
	}
	return b.String()
}
