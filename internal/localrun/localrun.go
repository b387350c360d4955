package localrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/memckpt"
	"github.com/elastictraining/coordinator/presence"
)

// Config configures Run.
type Config struct {
	// Executable is the coordinator binary the sidecars are started from.
	Executable string
	Job        string
	// Spec is the job's spec; its np says how many local nodes to run.
	Spec    membership.Spec
	NProc   int
	Command []string
	// Devices are the machine's GPUs as CUDA_VISIBLE_DEVICES names them,
	// none if empty. Each worker node sees its own share as if it were a
	// machine of its own: worker node i the devices of its processes,
	// i*NProc onwards, modulo their number.
	Devices []string
	// DataDir keeps etcd's data; a temporary directory, removed at the end,
	// if empty.
	DataDir string
	// ClientURL is where the embedded etcd serves; a free localhost port if
	// empty.
	ClientURL string
	// TTL is the sidecars' lease TTL; Grace their stop grace period.
	TTL   time.Duration
	Grace time.Duration
	// SidecarArgs are passed to every sidecar before the command.
	SidecarArgs []string
	// SidecarLogLevel is the sidecars' log level.
	SidecarLogLevel string
	// Env is the sidecars' environment.
	Env []string
	// Out receives the progress lines and the trainers' output; Err the
	// sidecars' logs and the trainers' error output.
	Out    io.Writer
	Err    io.Writer
	Logger hclog.Logger
	// LogNote, if set, is printed at the start: where the ranks' output
	// goes.
	LogNote string
	// KillNow, once closed, kills the nodes still stopping after ctx
	// ended, without waiting out their grace period (a second Ctrl-C).
	KillNow <-chan struct{}
	// Metrics, if set, is where the job's metrics are served: the
	// coordinator's series of the job and each local sidecar's (which
	// then serves its own on a port of its own), with the job's pages.
	// Run closes it.
	Metrics net.Listener
}

// Run runs the job until it ends and returns the job's exit code: 0 when it
// succeeded, the failed child's code when it failed. When ctx ends first,
// every node leaves and Run returns ctx's error.
func Run(ctx context.Context, cfg Config) (int, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Metrics != nil {
		defer cfg.Metrics.Close() // closed already once served
	}
	// What killed sidecars left of the trainers' modules: each sidecar
	// sweeps it as it starts; run does first, to say so.
	if n := memckpt.SweepModuleDirs(os.TempDir()); n > 0 {
		fmt.Fprintf(cfg.Out, "coordinator run: removed %s of sidecars that were killed from %s\n",
			english.Count(n, "module directory"), os.TempDir())
	}
	dataDir := cfg.DataDir
	if dataDir == "" {
		if swept := sweepDataDirs(os.TempDir()); swept.count > 0 {
			fmt.Fprintf(cfg.Out, "coordinator run: removed %s of runs that were killed (%d MB) from %s\n",
				english.Count(swept.count, "data directory"), swept.bytes>>20, os.TempDir())
		}
		tmp, err := os.MkdirTemp("", dataDirPrefix)
		if err != nil {
			return 1, err
		}
		defer os.RemoveAll(tmp)
		dataDir = tmp
	}
	srv, err := embedetcd.Start(ctx, embedetcd.Config{
		DataDir: filepath.Join(dataDir, "etcd"), ClientURL: cfg.ClientURL, LogFile: filepath.Join(dataDir, "etcd.log"),
	})
	if err != nil {
		return 1, err
	}
	defer srv.Close()
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: []string{srv.ClientURL()}})
	if err != nil {
		return 1, err
	}
	defer cli.Close()

	keys := membership.DefaultKeys()
	client := jobclient.New(cli, keys)
	if st, err := client.Status(ctx, cfg.Job); err == nil && st.Phase.Done() {
		return 1, fmt.Errorf("job %s already ended (%s) in %s; use another --job or --data-dir", cfg.Job, st.Phase, dataDir)
	}
	_, err = membership.UpdateSpec(ctx, cli, keys, cfg.Job, func(s *membership.Spec) error { *s = cfg.Spec; return nil }, cfg.Spec)
	if errors.Is(err, membership.ErrNoGoodSpec) {
		// run's own etcd (--data-dir) holds a malformed spec: the flags'
		// spec replaces it whole, as it would a good one.
		var val string
		if val, err = membership.Encode(cfg.Spec); err == nil {
			_, err = cli.Put(ctx, keys.Spec(cfg.Job), val)
		}
	}
	if err != nil {
		return 1, fmt.Errorf("store the job's spec: %w", err)
	}
	fmt.Fprintf(cfg.Out, "coordinator run: etcd serves on %s; job %s, np %s\n", srv.ClientURL(), cfg.Job, cfg.Spec.NP)
	fmt.Fprintf(cfg.Out, "coordinator run: resize from another terminal with: coordinator scale --etcd-endpoints %s --job %s --np N\n", srv.ClientURL(), cfg.Job)
	if cfg.LogNote != "" {
		fmt.Fprintf(cfg.Out, "coordinator run: %s\n", cfg.LogNote)
	}

	var (
		reg      prometheus.Registerer
		sidecars *sidecarMetrics
	)
	if cfg.Metrics != nil {
		r := prometheus.NewRegistry()
		reg, sidecars = r, newSidecarMetrics()
		m := serveMetrics(cfg.Metrics, r, sidecars, cli, keys, cfg.Logger)
		defer m.stop()
		fmt.Fprintf(cfg.Out, "coordinator run: metrics of the job and its nodes on http://%s/metrics, its page on http://%s/jobs/%s\n",
			cfg.Metrics.Addr(), cfg.Metrics.Addr(), cfg.Job)
	}
	coord, err := coordinator.New(coordinator.Config{Client: cli, Keys: keys, SessionTTL: 2 * time.Second, Logger: cfg.Logger, Registerer: reg})
	if err != nil {
		return 1, err
	}
	coordCtx, stopCoord := context.WithCancel(context.WithoutCancel(ctx))
	coordDone := make(chan struct{})
	go func() {
		defer close(coordDone)
		_ = coord.Run(coordCtx)
	}()
	defer func() {
		stopCoord()
		<-coordDone
	}()

	r := &runner{cfg: cfg, cli: cli, keys: keys, client: client, endpoint: srv.ClientURL(), stateDir: filepath.Join(dataDir, "sidecars"), metrics: sidecars,
		nodes: map[int]*node{}, pending: map[int]*node{}, ports: map[int]bool{}, exited: make(chan *node, 16), restarts: make(chan *node), done: make(chan struct{})}
	defer close(r.done)
	return r.run(ctx)
}

// runner supervises the local nodes of one job.
type runner struct {
	cfg      Config
	cli      *clientv3.Client
	keys     membership.Keys
	client   *jobclient.Client
	endpoint string
	// stateDir is the sidecars' state directory, the run's own: a sidecar
	// started again after a crash takes its node back from there.
	stateDir string
	// metrics, if set, reads each sidecar's metrics for run's own.
	metrics *sidecarMetrics

	// Owned by run's goroutine.
	nodes   map[int]*node // running sidecars, by index
	pending map[int]*node // crashed sidecars waiting to start again
	ports   map[int]bool  // handed out to nodes

	exited   chan *node
	restarts chan *node    // crashed nodes whose backoff is over
	done     chan struct{} // closed when Run returns
	wg       sync.WaitGroup
}

func (r *runner) run(ctx context.Context) (int, error) {
	specs := make(chan membership.Spec, 1)
	statuses := make(chan membership.Status, 1)
	watchCtx, stopWatches := context.WithCancel(ctx)
	var watches sync.WaitGroup
	watches.Add(2)
	go func() {
		defer watches.Done()
		_ = presence.Follow(watchCtx, r.cli, presence.Range{Key: r.keys.Spec(r.cfg.Job)}, nil, func(u presence.Update) error {
			if n := len(u.Changes); n > 0 && !u.Changes[n-1].Deleted {
				if s, err := membership.DecodeSpec(u.Changes[n-1].Value); err == nil {
					replace(specs, s)
				}
			}
			return nil
		})
	}()
	go func() {
		defer watches.Done()
		_ = r.client.WatchStatus(watchCtx, r.cfg.Job, func(s membership.Status) (bool, error) {
			replace(statuses, s)
			return false, nil
		})
	}()
	defer func() {
		stopWatches()
		watches.Wait()
	}()

	progress := newProgress(r.cfg.Out, r.client, r.cfg.Job)
	if err := r.startOtherRoles(); err != nil {
		r.stopAll(r.cfg.Grace + 5*time.Second)
		return 1, err
	}
	want := r.cfg.Spec.Workers().Max + r.cfg.Spec.Spares
	r.scaleTo(ctx, want)
	for {
		select {
		case <-ctx.Done():
			if n := len(r.nodes); n > 0 {
				fmt.Fprintf(r.cfg.Out, "coordinator run: stopping %s: their trainers get the %s grace period to exit; interrupt again to kill them now\n",
					english.Count(n, "node"), r.cfg.Grace)
			}
			r.stopAll(r.cfg.Grace + 5*time.Second)
			return 130, ctx.Err()
		case s := <-specs:
			if n := s.Workers().Max + s.Spares; n != want {
				want = n
				r.scaleTo(ctx, want)
			}
		case n := <-r.exited:
			r.nodeExited(n)
		case n := <-r.restarts:
			if r.pending[n.index] == n {
				r.restart(n)
			}
		case <-progress.due():
			progress.flush()
		case st := <-statuses:
			progress.report(ctx, st)
			if st.Phase.Done() {
				r.finish()
				if st.Phase == membership.JobSucceeded {
					return 0, nil
				}
				return max(st.ExitCode, 1), nil
			}
		}
	}
}

// replace puts v in a one-slot channel, dropping what it held: the reader
// wants the newest value only.
func replace[T any](ch chan T, v T) {
	select {
	case <-ch:
	default:
	}
	ch <- v
}

// finish lets every sidecar exit on its own, as they do when the job ends,
// and kills those that have not after the grace period.
func (r *runner) finish() {
	clear(r.pending)
	deadline := time.After(r.cfg.Grace + 10*time.Second)
	for len(r.nodes) > 0 {
		select {
		case n := <-r.exited:
			delete(r.nodes, n.index)
		case <-deadline:
			r.stopAll(time.Second)
			return
		}
	}
	r.wg.Wait()
}

// stopAll asks every node to leave and waits up to timeout before killing.
func (r *runner) stopAll(timeout time.Duration) {
	clear(r.pending)
	for _, n := range r.nodes {
		n.stop()
	}
	deadline := time.After(timeout)
	killNow := r.cfg.KillNow
	for len(r.nodes) > 0 {
		select {
		case n := <-r.exited:
			delete(r.nodes, n.index)
		case <-killNow:
			fmt.Fprintf(r.cfg.Out, "coordinator run: killing %s\n", english.Count(len(r.nodes), "node"))
			for _, n := range r.nodes {
				n.kill()
			}
			killNow, deadline = nil, nil
		case <-deadline:
			for _, n := range r.nodes {
				n.kill()
			}
			killNow, deadline = nil, nil
		}
	}
	r.wg.Wait()
}
