//go:build !sidecaronly

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/etcdauth"
	"github.com/elastictraining/coordinator/internal/jobpages"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

type serveOptions struct {
	etcd           etcdFlags
	listen         string
	id             string
	sessionTTL     time.Duration
	settle         time.Duration
	stopTimeout    time.Duration
	eventRetention time.Duration
	jobRetention   time.Duration
	logLevel       string
	enableAuth     bool
	kube           kubeOptions
}

func newServeCommand(env lookupEnv) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve --etcd-endpoints URLS [flags]",
		Short: "Run the coordinator daemon (leader-elected; run two or more)",
		Long: `serve runs a coordinator replica. Replicas elect a leader through etcd; the
leader watches every job, commits generations, and writes each job's status and
events. Run two or more: when the leader stops, another takes over within the
session TTL, from what is stored in etcd, without restarting healthy jobs.

It serves Prometheus metrics on /metrics, liveness on /healthz and readiness
(etcd answers) on /readyz.

With --kubernetes the leader also runs the Kubernetes bridge in --namespace:
it scales each job's workloads (labelled elastic.job=JOB, elastic.role=ROLE)
through their scale subresource, writes the ConfigMap JOB-elastic with the
endpoints of every generation, keeps a headless Service per pod that asks for
one (annotation elastic.intranet: Service), evicts the node of a deleted or
failed pod at once, and applies the job's cleanPodPolicy when it ends. It needs
only a Role in that namespace (see deploy/). Without a usable kubeconfig (or,
without --kubeconfig, outside a cluster) it says so and exits.

It also runs the namespace's ElasticJob, PaddleJob and MSJob resources: a
StatefulSet per role with the sidecar injected (its binary copied from
--sidecar-image by an init container), a governing Service, the job's etcd
spec, and the resource's status and Events. A kind whose CRD is missing, or
that the Role does not allow, stops no other kind.

With --autoscale the leader also resizes elastic jobs (a worker range: an
ElasticJob's minReplicas..maxReplicas, a PaddleJob's requests..limits, or np
MIN:MAX in etcd) to what the nodes can place, one whole worker per node,
shrinking them for pending pods of a higher priority and never below their
minimum; growth waits --autoscale-cooldown after a change. It reads every
node and pod (a ClusterRole: deploy/autoscaler). With
--autoscale-deletion-cost it also sets the deletion cost of other
workloads' ReplicaSet pods, so that their scale-downs free room for whole
workers (deploy/autoscaler-deletion-cost).

With --kueue a job labelled kueue.x-k8s.io/queue-name is Kueue's to admit:
it gets a Workload (its workers counted from np's maximum down to its
minimum), waits suspended until the Workload is admitted, runs at the
admitted size on the admitted flavors, and is stopped gracefully and
requeued when Kueue evicts it (deploy/kueue).`,
		Example: `  coordinator serve --etcd-endpoints https://etcd:2379 --cacert ca.crt --cert client.crt --key client.key
  coordinator serve --etcd-endpoints https://etcd:2379 --cacert ca.crt --cert coordinator.crt --key coordinator.key \
      --etcd-enable-auth --kubernetes --namespace training --sidecar-etcd-secret elastic-sidecar-etcd --sidecar-etcd-auth`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	fs := cmd.Flags()
	o.etcd.register(fs, env)
	fs.StringVar(&o.listen, "listen-metrics", ":9090", "address of the metrics and health endpoints")
	fs.StringVar(&o.id, "id", fromEnv(env, "", "POD_NAME"), "name of this replica in the election; random if empty"+envNote("POD_NAME"))
	fs.DurationVar(&o.sessionTTL, "session-ttl", coordinator.DefaultSessionTTL, "election lease TTL: how long a crashed leader keeps the lead")
	fs.DurationVar(&o.settle, "settle-window", coordinator.DefaultSettleWindow, "how long a job with an np range waits for more nodes below its maximum")
	fs.DurationVar(&o.stopTimeout, "stop-timeout", coordinator.DefaultStopTimeout, "how long a node may take to ack a stop before it is evicted")
	fs.DurationVar(&o.eventRetention, "event-retention", coordinator.DefaultEventRetention, "how long job events are kept (at least 2s)")
	fs.DurationVar(&o.jobRetention, "finished-job-retention", coordinator.DefaultFinishedJobRetention,
		"how long a finished job's keys are kept before they are deleted; 0 keeps them (a Kubernetes resource's job goes with the resource)")
	fs.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.BoolVar(&o.enableAuth, "etcd-enable-auth", false,
		"turn etcd's auth on if it is off, with a user root reached by client certificate: connect with one whose CN is root (coordinator certs makes it)")
	o.kube.register(fs, env)
	checkGiven(fs, "listen-metrics", func() error { return checkListenAddress("--listen-metrics", o.listen) })
	checkGiven(fs, "log-level", func() error { return checkLogLevel(o.logLevel) })
	return cmd
}

func (o *serveOptions) run(cmd *cobra.Command) error {
	logger, err := newLogger(cmd.ErrOrStderr(), "serve", o.logLevel)
	if err != nil {
		return err
	}
	switch {
	case o.sessionTTL < presence.MinTTL:
		return usagef("--session-ttl %s: at least %s", o.sessionTTL, presence.MinTTL)
	case o.settle < 0:
		return usagef("--settle-window %s: must not be negative", o.settle)
	case o.stopTimeout < 0:
		return usagef("--stop-timeout %s: must not be negative", o.stopTimeout)
	case o.eventRetention < 2*time.Second:
		return usagef("--event-retention %s: at least 2s", o.eventRetention)
	case o.jobRetention < 0:
		return usagef("--finished-job-retention %s: must not be negative (0 keeps finished jobs)", o.jobRetention)
	}
	if o.kube.autoscale && !o.kube.enabled {
		return usagef("--autoscale needs --kubernetes: it resizes jobs to what the cluster's nodes can place")
	}
	if o.kube.kueue && !o.kube.enabled {
		return usagef("--kueue needs --kubernetes: it runs job resources as Kueue admits them")
	}
	if o.kube.deletionCost && !o.kube.autoscale {
		return usagef("--autoscale-deletion-cost needs --autoscale: it steers scale-downs to free room for the jobs it grows")
	}
	if o.kube.enabled {
		if _, err := o.kube.parse(); err != nil {
			return err
		}
	}
	ctx, cli, keys, stop, err := o.etcd.untilSignalled(cmd.Context())
	if err != nil {
		return err
	}
	defer stop()
	if o.enableAuth {
		if err := etcdauth.Enable(ctx, cli); err != nil {
			return err
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var tasks []coordinator.LeaderTask
	if o.kube.enabled {
		// --kubernetes that cannot reach Kubernetes (no kubeconfig, not in a
		// cluster) is a command line that cannot work: a replica that stayed
		// Ready without its bridge would hide that from whoever deployed it.
		kubeTasks, err := o.kube.leaderTasks(ctx, cli, keys, o.etcd.endpoints, logger, reg)
		if err != nil {
			return err
		}
		tasks = append(tasks, kubeTasks...)
	}
	c, err := coordinator.New(coordinator.Config{
		Client: cli, Keys: keys, ID: o.id, SessionTTL: o.sessionTTL, SettleWindow: o.settle,
		StopTimeout: o.stopTimeout, EventRetention: o.eventRetention, FinishedJobRetention: o.jobRetention,
		Logger: logger, Registerer: reg, LeaderTasks: tasks,
	})
	if err != nil {
		return usageError{err}
	}

	listener, err := net.Listen("tcp", o.listen)
	if err != nil {
		return usagef("--listen-metrics %s: %v", o.listen, err)
	}
	srv := &http.Server{Handler: healthMux(reg, c, cli, keys), ReadHeaderTimeout: 5 * time.Second}
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(listener) }()
	logger.Info("serving", "metrics", "http://"+listener.Addr().String()+"/metrics")

	runErr := c.Run(ctx)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if err := <-httpDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server: %w", err)
	}
	return runErr
}

// healthMux serves /metrics, /healthz (the process is up, and whether it
// leads), /readyz (etcd answers) and the read-only pages of the jobs.
func healthMux(reg *prometheus.Registry, c *coordinator.Coordinator, cli *clientv3.Client, keys membership.Keys) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	pages := jobpages.Handler(jobclient.New(cli, keys))
	mux.Handle("/jobs", pages)
	mux.Handle("/jobs/", pages)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/jobs", http.StatusFound) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ok\nleader: %t\n", c.IsLeader())
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if _, err := cli.Get(ctx, keys.Prefix(), clientv3.WithCountOnly(), clientv3.WithLimit(1)); err != nil {
			http.Error(w, "etcd: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
