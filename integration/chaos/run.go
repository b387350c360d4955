package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/internal/testkit/etcdcluster"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/internal/testkit/tcpproxy"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

const job = "chaos"

// config is what a run is made of.
type config struct {
	plan
	Binary     string
	EtcdBinary string // runs the etcd members; Binary if empty
	Worker     string
	// Warm runs the worker (worker.py) on the warm path with checkpoints
	// in memory: under --preload, saving every step through package
	// memckpt instead of committing a file every CkptEvery steps.
	Warm bool
	// InPlace runs worker_inplace.py, which trains in place (elastic.run)
	// under run --in-place: survivors keep their process across
	// generations, each node keeps a started spare while it holds no
	// rank. Memory checkpoints as on the warm path (Warm is set too).
	InPlace bool
	Python  string // the interpreter of the in-place worker, one with torch
	// Spares is the spec's spares: the job keeps that many of the nodes
	// beyond np as spares (the nodes beyond np stand by either way).
	Spares   int
	Replicas int           // coordinator replicas
	Beat     time.Duration // the worker's heartbeat
	// BeatEvery is how many steps apart the shell worker reports its
	// progress to the hang watch: each report is a process started (about
	// 4 ms of CPU), too many on two cores at every 50 ms step of four
	// ranks. The Python worker reports every step, which costs nothing.
	BeatEvery int
	// HangTimeout is the sidecars' --hang-timeout: fixed rather than
	// learned, so that a hang ends within a known time and the invariant
	// that bounds it is sharp. 2 s is 20 times the shell worker's
	// reporting interval (BeatEvery steps of Beat), 4 times a slow rank's
	// at its slowest, and short enough for several hangs a run.
	HangTimeout time.Duration
	CkptEvery   int           // steps between checkpoints
	GracePeriod time.Duration // SIGTERM → SIGKILL, longer than the stop timeout
	Converge    time.Duration // how long the quiet period may take
	Keep        bool          // keep the run's directory even when it passed
}

// node is one sidecar and its links to the etcd members.
type node struct {
	id      string
	sidecar *supervised
	links   []*tcpproxy.Proxy
}

// injection is a fault as it was carried out.
type injection struct {
	fault
	At   time.Time
	Note string // what it struck: a pid, the leader, an error
	Pid  int    // the trainer a stop-trainer or deadlock-trainer struck
}

// statusSample is the job's status as seen at a moment.
type statusSample struct {
	At time.Time
	membership.Status
}

// run is one seed's job and everything around it.
type run struct {
	cfg  config
	dir  string
	log  string // the workers' log
	ckpt string
	slow string // where slow-stop files go
	// deadlock holds a file per node naming the trainer that is to sleep
	// forever at its next step; straggle a file per node with the seconds
	// a slow rank's step takes.
	deadlock, straggle string
	marker             string

	etcd     *etcdcluster.Cluster
	replicas []*coordinatorReplica
	nodes    []*node
	cli      *clientv3.Client
	client   *jobclient.Client
	start    time.Time

	mu         sync.Mutex
	injections []injection
	samples    []statusSample
	target     int
	scaleMu    sync.Mutex
}

// execute runs one seed: the job, the faults, the quiet period, the
// teardown, and the checks.
func execute(ctx context.Context, cfg config) (*result, error) {
	r := &run{cfg: cfg, target: cfg.NP}
	var err error
	if r.dir, err = os.MkdirTemp("", fmt.Sprintf("chaos-%d-", cfg.Seed)); err != nil {
		return nil, err
	}
	r.log, r.ckpt, r.slow = filepath.Join(r.dir, "worker.log"), filepath.Join(r.dir, "checkpoint"), filepath.Join(r.dir, "slow")
	r.deadlock, r.straggle = filepath.Join(r.dir, "deadlock"), filepath.Join(r.dir, "straggle")
	for _, d := range []string{r.slow, r.deadlock, r.straggle} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	mark := make([]byte, 8)
	_, _ = rand.Read(mark)
	r.marker = "ELASTIC_CHAOS_MARK=" + hex.EncodeToString(mark)

	faults := schedule(cfg.plan)
	var text strings.Builder
	for _, f := range faults {
		fmt.Fprintln(&text, f)
	}
	_ = os.WriteFile(filepath.Join(r.dir, "schedule.txt"), []byte(text.String()), 0o600)
	if err := r.up(ctx); err != nil {
		r.down()
		return nil, fmt.Errorf("bring the job up: %w (processes' logs in %s)", err, r.dir)
	}
	r.start = time.Now()
	sampling, stopSampling := context.WithCancel(ctx)
	go r.sample(sampling)

	var wg sync.WaitGroup
	for _, f := range faults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-time.After(time.Until(r.start.Add(f.At))):
				r.inject(ctx, f)
			case <-ctx.Done():
			}
		}()
	}
	select {
	case <-time.After(time.Until(r.start.Add(cfg.Duration))):
	case <-ctx.Done():
	}
	wg.Wait()
	end := time.Now()

	converged, final, convErr := r.converge(ctx)
	stopSampling()
	r.writeInjections()
	events, _ := r.client.Events(context.Background(), job)
	r.writeEvents(events)
	r.down()
	left := r.leftovers()

	res := analyse(r, end, converged, final, convErr, events, left)
	if len(res.violations) == 0 && !cfg.Keep {
		_ = os.RemoveAll(r.dir)
		res.dir = ""
	}
	return res, nil
}

// up starts etcd, the coordinator replicas and the sidecars, and waits for
// the first generation to run at the target.
func (r *run) up(ctx context.Context) error {
	var err error
	etcdBinary := r.cfg.EtcdBinary
	if etcdBinary == "" {
		etcdBinary = r.cfg.Binary
	}
	r.etcd, err = etcdcluster.Start(ctx, etcdcluster.Config{Binary: etcdBinary, Dir: filepath.Join(r.dir, "etcd"), Env: []string{r.marker}})
	if err != nil {
		return err
	}
	endpoints := strings.Join(r.etcd.Endpoints(), ",")
	if r.cli, err = etcdclient.New(etcdclient.Config{Endpoints: r.etcd.Endpoints()}); err != nil {
		return err
	}
	r.client = jobclient.New(r.cli, membership.DefaultKeys())
	for i := range r.cfg.Replicas {
		port, err := embedetcd.FreePort("127.0.0.1")
		if err != nil {
			return err
		}
		metrics := fmt.Sprintf("127.0.0.1:%d", port)
		name := fmt.Sprintf("coordinator-%d", i)
		r.replicas = append(r.replicas, &coordinatorReplica{metrics: metrics, supervised: supervise(name, r.cfg.Binary,
			filepath.Join(r.dir, name+".log"), []string{r.marker},
			"serve", "--etcd-endpoints", endpoints, "--id", name, "--listen-metrics", metrics,
			"--session-ttl", r.cfg.TTL.String(), "--stop-timeout", r.cfg.StopTimeout.String(), "--log-level", "info")})
	}
	for i := range r.cfg.Nodes {
		n := &node{id: fmt.Sprintf("n%d", i)}
		var via []string
		for _, m := range r.etcd.Members {
			p, err := tcpproxy.Start(strings.TrimPrefix(m.ClientURL, "http://"))
			if err != nil {
				return err
			}
			n.links = append(n.links, p)
			via = append(via, "http://"+p.Addr())
		}
		ports := make([]int, 2)
		for j := range ports {
			if ports[j], err = embedetcd.FreePort("127.0.0.1"); err != nil {
				return err
			}
		}
		env := []string{r.marker, "CHAOS_LOG=" + r.log, "CHAOS_CKPT=" + r.ckpt, "CHAOS_SLOW_DIR=" + r.slow, "CHAOS_NODE=" + n.id,
			"CHAOS_DEADLOCK_DIR=" + r.deadlock, "CHAOS_STRAGGLE_DIR=" + r.straggle,
			"CHAOS_BEAT=" + strconv.FormatFloat(r.cfg.Beat.Seconds(), 'f', -1, 64), "CHAOS_CKPT_EVERY=" + strconv.Itoa(r.cfg.CkptEvery),
			"CHAOS_BEAT_EVERY=" + strconv.Itoa(r.cfg.BeatEvery)}
		args := []string{"sidecar", "--etcd-endpoints", strings.Join(via, ","), "--job", job, "--node-id", n.id,
			"--host", "127.0.0.1", "--port", strconv.Itoa(ports[0]), "--master-port", strconv.Itoa(ports[1]),
			"--np", strconv.Itoa(r.cfg.NP), "--ttl", r.cfg.TTL.String(), "--grace-period", r.cfg.GracePeriod.String(),
			"--max-restarts", "100000", "--hang-timeout", r.cfg.HangTimeout.String(), "--max-hang-restarts", "100000",
			"--spares", strconv.Itoa(r.cfg.Spares),
			"--log-level", "info"}
		args = append(append(append(args, warmArgs(r.cfg)...), "--"), r.cfg.command()...)
		n.sidecar = supervise(n.id, r.cfg.Binary, filepath.Join(r.dir, n.id+".log"), env, args...)
		r.nodes = append(r.nodes, n)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return r.client.WatchStatus(ctx, job, func(s membership.Status) (bool, error) {
		return s.Phase == membership.JobRunning && s.Members == r.cfg.NP && s.Ready == r.cfg.NP, nil
	})
}

// down stops every process the run started: sidecars first, as a job's
// pods are deleted, then the coordinators and etcd.
func (r *run) down() {
	var wg sync.WaitGroup
	for _, n := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.sidecar.stop(r.cfg.GracePeriod + 10*time.Second)
			for _, p := range n.links {
				p.Close()
			}
		}()
	}
	wg.Wait()
	for _, c := range r.replicas {
		c.stop(10 * time.Second)
	}
	if r.cli != nil {
		_ = r.cli.Close()
	}
	if r.etcd != nil {
		r.etcd.Close()
	}
}

// sample records the job's status every 100 ms.
func (r *run) sample(ctx context.Context) {
	for ctx.Err() == nil {
		c, cancel := context.WithTimeout(ctx, time.Second)
		st, err := r.client.Status(c, job)
		cancel()
		if err == nil {
			r.mu.Lock()
			r.samples = append(r.samples, statusSample{At: time.Now(), Status: st})
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// converge waits, once every fault has ended, for the job to run at the
// target with every worker alive, as `coordinator status -o json` reports it.
func (r *run) converge(ctx context.Context) (time.Duration, membership.Status, error) {
	start := time.Now()
	r.mu.Lock()
	target := r.target
	r.mu.Unlock()
	var last membership.Status
	var lastErr error
	for time.Since(start) < r.cfg.Converge && ctx.Err() == nil {
		st, err := r.statusCLI()
		if err == nil {
			last = st
			if st.Phase == membership.JobRunning && st.NP == membership.FixedNP(target) && st.Members == target &&
				st.WorldSize == target && st.Ready == target && r.allAlive(st.Generation, target) {
				return time.Since(start), st, nil
			}
		}
		lastErr = err
		time.Sleep(250 * time.Millisecond)
	}
	return time.Since(start), last, fmt.Errorf("not Running at np %d with every worker alive after %s (last status %+v, error %v)",
		target, r.cfg.Converge, last, lastErr)
}

// statusCLI runs `coordinator status -o json`.
func (r *run) statusCLI() (membership.Status, error) {
	cmd := exec.Command(r.cfg.Binary, "status", "--etcd-endpoints", strings.Join(r.etcd.Endpoints(), ","), "--job", job, "-o", "json")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return membership.Status{}, fmt.Errorf("%v: %s", err, strings.TrimSpace(errOut.String()))
	}
	// The JSON a script reads: numbers as numbers, np as {min,max}.
	var view struct {
		Phase        membership.JobPhase     `json:"phase"`
		Generation   int64                   `json:"generation"`
		NP           *struct{ Min, Max int } `json:"np"`
		Members      int                     `json:"members"`
		Ready        int                     `json:"ready"`
		WorldSize    int                     `json:"worldSize"`
		Restarts     int                     `json:"restarts"`
		HangRestarts int                     `json:"hangRestarts"`
		Message      string                  `json:"message"`
		ExitCode     int                     `json:"exitCode"`
	}
	if err := json.Unmarshal(out.Bytes(), &view); err != nil {
		return membership.Status{}, err
	}
	st := membership.Status{Phase: view.Phase, Generation: view.Generation, Members: view.Members, Ready: view.Ready,
		WorldSize: view.WorldSize, Restarts: view.Restarts, HangRestarts: view.HangRestarts, Message: view.Message, ExitCode: view.ExitCode}
	if view.NP != nil {
		st.NP = membership.NP{Min: view.NP.Min, Max: view.NP.Max}
	}
	return st, nil
}

// allAlive reports whether n ranks of generation gen logged a heartbeat in
// the last second.
func (r *run) allAlive(gen int64, n int) bool {
	since := time.Now().Add(-time.Second)
	ranks := map[int]bool{}
	for _, l := range readLog(r.log) {
		if l.kind == "alive" && l.gen == gen && l.at.After(since) {
			ranks[l.rank] = true
		}
	}
	return len(ranks) == n
}

// leftovers lists the processes that carry the run's mark and are still
// alive ten seconds after the teardown.
func (r *run) leftovers() []string {
	var left []proctest.Process
	for range 100 {
		if left = proctest.Marked(r.marker); len(left) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	var out []string
	for _, p := range left {
		out = append(out, p.String())
	}
	return out
}

// writeInjections leaves the faults as they were carried out, with their
// wall-clock times, next to the processes' logs.
func (r *run) writeInjections() {
	r.mu.Lock()
	defer r.mu.Unlock()
	var text strings.Builder
	for _, in := range r.injections {
		fmt.Fprintf(&text, "%s %s: %s\n", in.At.Format("15:04:05.000"), in.fault, in.Note)
	}
	_ = os.WriteFile(filepath.Join(r.dir, "injections.txt"), []byte(text.String()), 0o600)
}

// writeEvents leaves the job's events next to the processes' logs.
func (r *run) writeEvents(events []membership.Event) {
	var text strings.Builder
	for _, e := range events {
		fmt.Fprintf(&text, "%s gen %d %s: %s\n", e.Time.Local().Format("15:04:05.000"), e.Generation, e.Type, e.Message)
	}
	_ = os.WriteFile(filepath.Join(r.dir, "events.txt"), []byte(text.String()), 0o600)
}

// warmArgs are the sidecar's flags of the warm path: the worker's own
// module preloaded, so that every generation after the first starts in a
// warm interpreter; memory checkpoints are on by default.
func warmArgs(cfg config) []string {
	if cfg.InPlace {
		return []string{"--in-place"}
	}
	if !cfg.Warm {
		return nil
	}
	return []string{"--preload", "elastic"}
}

// command is the training command: worker.sh, or python3 worker.py.
func (cfg config) command() []string {
	if cfg.InPlace {
		return []string{cfg.Python, cfg.Worker}
	}
	if cfg.Warm {
		return []string{"python3", cfg.Worker}
	}
	return []string{cfg.Worker}
}
