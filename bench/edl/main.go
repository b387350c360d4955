package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
)

// env is what every pass shares.
type env struct {
	cluster   *kubetest.Cluster
	kube      kubernetes.Interface
	dyn       dynamic.Interface
	etcd      *clientv3.Client
	etcdURL   string
	binary    string
	compress  int
	scheduler string // the kube-scheduler profile of every pod
	logs      string // where serve's logs go, at level info; "" for none
}

func main() {
	binary := flag.String("coordinator", "bin/coordinator", "the coordinator binary")
	passes := flag.Int("passes", 3, "passes of each case in each mode")
	compress := flag.Int("compress", 5, "the seed's schedule runs this many times faster")
	cases := flag.String("cases", "1,2", "cases to run")
	modes := flag.String("modes", "off,edl,on", "modes to run: off (fixed jobs), edl (EDL's rule), on (--autoscale)")
	out := flag.String("out", "bench/results", "directory of edl.md and the plots")
	scheduler := flag.String("scheduler", kubetest.BinPackingScheduler, "the kube-scheduler profile of every pod: "+kubetest.BinPackingScheduler+" or default-scheduler")
	logs := flag.String("logs", "", "write each pass's coordinator log, at level info, to this directory")
	flag.Parse()
	if err := run(*binary, *passes, *compress, *cases, *modes, *scheduler, *logs, *out); err != nil {
		fmt.Fprintln(os.Stderr, "edl:", err)
		os.Exit(1)
	}
}

func run(binary string, passes, compress int, cases, modes, scheduler, logs, out string) error {
	if compress < 1 || passes < 1 {
		return fmt.Errorf("-compress and -passes must be at least 1")
	}
	self, err := filepath.Abs(binary)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-edl-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	cluster, err := kubetest.Start(ctx, filepath.Join(dir, "cluster"))
	if err != nil {
		return err
	}
	defer cluster.Stop()
	e := &env{cluster: cluster, kube: cluster.Client, binary: self, compress: compress, scheduler: scheduler, logs: logs}
	if e.dyn, err = dynamic.NewForConfig(cluster.Config); err != nil {
		return err
	}
	if err := kubetest.ApplyElasticJobCRD(ctx, e.dyn); err != nil {
		return err
	}
	if err := addNodes(ctx, e.kube); err != nil {
		return err
	}
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{DataDir: filepath.Join(dir, "etcd"), LogFile: filepath.Join(dir, "etcd.log")})
	if err != nil {
		return err
	}
	defer etcd.Close()
	e.etcdURL = etcd.ClientURL()
	if e.etcd, err = etcdclient.New(etcdclient.Config{Endpoints: []string{e.etcdURL}}); err != nil {
		return err
	}
	defer e.etcd.Close()

	results := map[int]map[string][]*pass{}
	for _, c := range splitInts(cases) {
		results[c] = map[string][]*pass{}
		for i := range passes {
			for _, m := range splitStrings(modes) {
				p := &pass{env: e, cas: c, mode: m, ns: fmt.Sprintf("c%d-%s-p%d", c, m, i)}
				t0 := time.Now()
				fmt.Fprintf(os.Stderr, "edl: %s, pass %d ...\n", p, i+1)
				if err := p.run(ctx); err != nil {
					return fmt.Errorf("%s, pass %d: %w", p, i+1, err)
				}
				fmt.Fprintf(os.Stderr, "edl: %s, pass %d: %s\n", p, i+1, time.Since(t0).Round(time.Second))
				results[c][m] = append(results[c][m], p)
			}
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return report(results, compress, scheduler, out)
}
