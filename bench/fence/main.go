package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/elastictraining/coordinator/bench/internal/stats"
	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/internal/testkit/tcpproxy"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

const job = "fence"

func main() {
	binary := flag.String("coordinator", "bin/coordinator", "the coordinator binary")
	trainer := flag.String("trainer", "testdata/fencetrainer.sh", "the fence trainer")
	runs := flag.Int("runs", 20, "repetitions of each fault")
	nodes := flag.Int("nodes", 3, "nodes of the job (np 2:nodes); each fault takes one of them")
	ttl := flag.Duration("ttl", presence.DefaultTTL, "the sidecars' lease TTL")
	out := flag.String("out", "", "also write the report here")
	flag.Parse()

	b, err := start(*binary, *trainer, *nodes, *ttl)
	if err != nil {
		fatalf("%v", err)
	}
	defer b.close()
	faults := []fault{
		{name: "SIGSTOP of the sidecar", apply: func(n *node) { _ = syscall.Kill(n.pid(), syscall.SIGSTOP) },
			heal: func(n *node) { _ = syscall.Kill(n.pid(), syscall.SIGCONT) }},
		{name: "network to etcd cut", apply: func(n *node) { n.proxy.Cut() }, heal: func(n *node) { n.proxy.Heal() }},
	}
	var results []result
	for _, f := range faults {
		r := result{fault: f.name}
		for i := range *runs {
			s, err := b.measure(f, b.nodes[i%len(b.nodes)])
			if err != nil {
				fatalf("%s, run %d: %v\n%s", f.name, i+1, err, b.tail())
			}
			r.samples = append(r.samples, s)
			fmt.Fprintf(os.Stderr, "%s %2d: dead %s after the fault, %s before the lease expired, %s before the next generation\n",
				f.name, i+1, stats.Ms(s.dead), stats.Ms(s.beforeExpiry), stats.Ms(s.beforeNext))
			if s.beforeNext > 2*(*ttl) {
				b.explain()
			}
		}
		results = append(results, r)
	}
	overlaps := overlapsIn(readBeats(b.log))
	var buf bytes.Buffer
	report(&buf, results, overlaps, *runs, *nodes, *ttl)
	os.Stdout.Write(buf.Bytes())
	if *out != "" {
		if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	if len(overlaps) > 0 {
		os.Exit(1)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fence: "+format+"\n", args...)
	os.Exit(1)
}

// fault is what a node suffers, and how it is undone.
type fault struct {
	name        string
	apply, heal func(*node)
}

// sample is one fault's timings.
type sample struct {
	dead         time.Duration // fault → trainer dead
	beforeExpiry time.Duration // trainer dead → lease expired
	beforeNext   time.Duration // trainer dead → next generation's first start
}

type result struct {
	fault   string
	samples []sample
}

// bench is the running job.
type bench struct {
	dir    string
	log    string
	etcd   *exec.Cmd
	serve  *exec.Cmd
	nodes  []*node
	cli    *clientv3.Client
	client *jobclient.Client
	keys   membership.Keys
	out    *proctest.Buffer
}

// node is one sidecar and its link to etcd.
type node struct {
	id    string
	cmd   *exec.Cmd
	proxy *tcpproxy.Proxy
}

func (n *node) pid() int { return n.cmd.Process.Pid }

func start(binary, trainer string, nodes int, ttl time.Duration) (*bench, error) {
	dir, err := os.MkdirTemp("", "bench-fence-")
	if err != nil {
		return nil, err
	}
	b := &bench{dir: dir, log: filepath.Join(dir, "trainer.log"), keys: membership.DefaultKeys(), out: &proctest.Buffer{}}
	port, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	peer, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	endpoint := fmt.Sprintf("127.0.0.1:%d", port)
	b.etcd = b.spawn(binary, "etcd", "--data-dir", filepath.Join(dir, "etcd"), "--listen-client-urls", "http://"+endpoint,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer))
	if b.cli, err = etcdclient.New(etcdclient.Config{Endpoints: []string{"http://" + endpoint}}); err != nil {
		return nil, err
	}
	b.client = jobclient.New(b.cli, b.keys)
	metrics, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	b.serve = b.spawn(binary, "serve", "--etcd-endpoints", "http://"+endpoint, "--listen-metrics", fmt.Sprintf("127.0.0.1:%d", metrics),
		"--log-level", "warn")
	for i := range nodes {
		proxy, err := tcpproxy.Start(endpoint)
		if err != nil {
			return nil, err
		}
		ports := make([]int, 2)
		for j := range ports {
			if ports[j], err = embedetcd.FreePort("127.0.0.1"); err != nil {
				return nil, err
			}
		}
		n := &node{id: fmt.Sprintf("n%d", i), proxy: proxy}
		n.cmd = b.spawn(binary, "sidecar", "--etcd-endpoints", "http://"+proxy.Addr(), "--job", job, "--node-id", n.id,
			"--host", "127.0.0.1", "--port", strconv.Itoa(ports[0]), "--master-port", strconv.Itoa(ports[1]),
			"--np", fmt.Sprintf("2:%d", nodes), "--ttl", ttl.String(), "--log-level", "warn", "--", trainer)
		b.nodes = append(b.nodes, n)
	}
	if _, err := b.waitRunning(0, len(b.nodes), 60*time.Second); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *bench) spawn(binary string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "FT_LOG="+b.log, "FT_BEAT=0.01")
	cmd.Stdout, cmd.Stderr = b.out, b.out
	if err := cmd.Start(); err != nil {
		fatalf("start %v: %v", args, err)
	}
	return cmd
}

func (b *bench) close() {
	for _, n := range b.nodes {
		_ = syscall.Kill(n.pid(), syscall.SIGCONT)
		n.proxy.Heal()
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		_ = n.cmd.Wait()
		n.proxy.Close()
	}
	for _, c := range []*exec.Cmd{b.serve, b.etcd} {
		if c != nil {
			_ = c.Process.Signal(syscall.SIGTERM)
			_ = c.Wait()
		}
	}
	if b.cli != nil {
		_ = b.cli.Close()
	}
	_ = os.RemoveAll(b.dir)
}

// explain prints the job's last events and the processes' last output,
// for a run that took far longer than the others.
func (b *bench) explain() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	events, err := b.client.Events(ctx, job)
	if err != nil {
		fmt.Fprintf(os.Stderr, "  (no events: %v)\n", err)
	}
	for _, e := range events[max(len(events)-8, 0):] {
		fmt.Fprintf(os.Stderr, "  event %s gen %d %s: %s\n", e.Time.Format("15:04:05.000"), e.Generation, e.Type, e.Message)
	}
	fmt.Fprintf(os.Stderr, "  output:\n%s\n", b.tail())
}

// tail is the end of the processes' output, for an error.
func (b *bench) tail() string {
	s := b.out.String()
	return s[max(len(s)-4000, 0):]
}

// waitRunning waits until a generation after gen runs with n members.
func (b *bench) waitRunning(gen int64, n int, timeout time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var got int64
	err := b.client.WatchStatus(ctx, job, func(s membership.Status) (bool, error) {
		got = s.Generation
		return s.Phase == membership.JobRunning && s.Generation > gen && s.Members == n, nil
	})
	if err != nil {
		return 0, fmt.Errorf("job never ran a generation after %d with %d members: %w", gen, n, err)
	}
	return got, nil
}

// measure makes a running node suffer f once and times what follows.
func (b *bench) measure(f fault, n *node) (sample, error) {
	st, err := b.client.Status(context.Background(), job)
	if err != nil {
		return sample{}, err
	}
	trainer, err := b.trainerOf(n, int(st.Generation))
	if err != nil {
		return sample{}, err
	}
	pidfd, err := unix.PidfdOpen(trainer, 0)
	if err != nil {
		return sample{}, fmt.Errorf("pidfd of trainer %d: %w", trainer, err)
	}
	defer unix.Close(pidfd)
	expired := b.watchDelete(b.keys.Node(job, n.id))

	faultAt := time.Now()
	f.apply(n)
	deadAt, err := waitExit(pidfd, 60*time.Second)
	if err != nil {
		f.heal(n)
		return sample{}, fmt.Errorf("trainer %d of node %s: %w", trainer, n.id, err)
	}
	var expiredAt time.Time
	select {
	case expiredAt = <-expired:
	case <-time.After(60 * time.Second):
		f.heal(n)
		return sample{}, errors.New("the node's lease never expired")
	}
	next, err := b.waitRunning(st.Generation, len(b.nodes)-1, 60*time.Second)
	if err != nil {
		f.heal(n)
		return sample{}, err
	}
	var nextAt time.Time
	ok := false
	for range 1000 { // the trainers log their start just after the members ack
		if nextAt, ok = firstStart(readBeats(b.log), int(st.Generation)+1, int(next)); ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.heal(n)
	if !ok {
		return sample{}, fmt.Errorf("no trainer of generation %d in the log", next)
	}
	if _, err := b.waitRunning(next, len(b.nodes), 60*time.Second); err != nil {
		return sample{}, err
	}
	return sample{dead: deadAt.Sub(faultAt), beforeExpiry: expiredAt.Sub(deadAt), beforeNext: nextAt.Sub(deadAt)}, nil
}

// trainerOf is the trainer of generation gen running below a node's sidecar;
// a member acks running as soon as its trainer is forked, a little before
// the trainer logs its start.
func (b *bench) trainerOf(n *node, gen int) (int, error) {
	for range 1000 {
		below := map[int]bool{}
		for _, pid := range guard.Descendants(n.pid()) {
			below[pid] = true
		}
		for _, bt := range readBeats(b.log) {
			if bt.kind == "start" && bt.gen == gen && below[bt.pid] {
				return bt.pid, nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("no trainer of generation %d below node %s", gen, n.id)
}

// watchDelete reports when key is deleted.
func (b *bench) watchDelete(key string) <-chan time.Time {
	out := make(chan time.Time, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	ch := b.cli.Watch(ctx, key)
	go func() {
		defer cancel()
		for resp := range ch {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					out <- time.Now()
					return
				}
			}
		}
	}()
	return out
}

// waitExit waits until the process of a pidfd has exited.
func waitExit(pidfd int, timeout time.Duration) (time.Time, error) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	deadline := time.Now().Add(timeout)
	for {
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
		if n > 0 {
			return time.Now(), nil
		}
		return time.Time{}, errors.New("still alive")
	}
}

// beat is one line of the fence trainer's log.
type beat struct {
	kind     string
	gen, pid int
	at       time.Time
}

func readBeats(path string) []beat {
	var out []beat
	for _, f := range stats.Records(path, 5) {
		gen, err1 := strconv.Atoi(f[1])
		pid, err2 := strconv.Atoi(f[3])
		us, err3 := strconv.ParseInt(f[4], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil {
			out = append(out, beat{kind: f[0], gen: gen, pid: pid, at: time.UnixMicro(us)})
		}
	}
	return out
}

// firstStart is when the first trainer of a generation in [from, to]
// started.
func firstStart(beats []beat, from, to int) (time.Time, bool) {
	var first time.Time
	for _, bt := range beats {
		if bt.kind == "start" && bt.gen >= from && bt.gen <= to && (first.IsZero() || bt.at.Before(first)) {
			first = bt.at
		}
	}
	return first, !first.IsZero()
}

// overlapsIn lists every sign of life of a generation after a later one's
// first trainer started.
func overlapsIn(beats []beat) []string {
	starts := map[int]time.Time{}
	for _, bt := range beats {
		if t, ok := starts[bt.gen]; bt.kind == "start" && (!ok || bt.at.Before(t)) {
			starts[bt.gen] = bt.at
		}
	}
	var out []string
	for _, bt := range beats {
		for g, t := range starts {
			if g > bt.gen && !bt.at.Before(t) {
				out = append(out, fmt.Sprintf("generation %d pid %d alive %s after generation %d started", bt.gen, bt.pid, bt.at.Sub(t), g))
				break
			}
		}
	}
	return out
}

func report(w io.Writer, results []result, overlaps []string, runs, nodes int, ttl time.Duration) {
	fmt.Fprintf(w, "Fencing a node that cannot act: %d runs per fault, %d nodes (np 2:%d), lease TTL %s, real processes\n",
		runs, nodes, nodes, ttl)
	fmt.Fprintf(w, "(etcd, coordinator and sidecars; each sidecar behind a proxy; the trainer beats every 10 ms)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tfault → trainer dead\ttrainer dead → lease expired\ttrainer dead → next generation started\tgaps ≤ 0")
	for _, r := range results {
		var dead, expiry, next []time.Duration
		bad := 0
		for _, s := range r.samples {
			dead, expiry, next = append(dead, s.dead), append(expiry, s.beforeExpiry), append(next, s.beforeNext)
			if s.beforeExpiry <= 0 || s.beforeNext <= 0 {
				bad++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d of %d\n", r.fault, spread(dead), spread(expiry), spread(next), bad, len(r.samples))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nmedian [min, max]. Overlaps (a generation alive after the next one started): %d\n", len(overlaps))
	for _, o := range overlaps[:min(len(overlaps), 10)] {
		fmt.Fprintln(w, "  "+o)
	}
}

func spread(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	return fmt.Sprintf("%s [%s, %s]", stats.Ms(stats.Median(s)), stats.Ms(s[0]), stats.Ms(s[len(s)-1]))
}
