package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/etcdclient"
)

// cluster is one measurement's processes: etcd, the coordinator and the
// agent processes.
type cluster struct {
	dir                       string
	endpoint                  string
	etcdMetrics, serveMetrics string
	etcd, serve               *exec.Cmd
	cli                       *clientv3.Client
	agents                    []*agentProc
	logs                      *os.File
	label                     string
}

// keepLogs, if set, is where each size's log (etcd, coordinator, agents)
// is kept.
var keepLogs string

// agentProc is one agent process and the last report of each kind it sent.
type agentProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	enc   *json.Encoder

	mu     sync.Mutex
	last   report
	lost   chan report
	errors []string
}

func freeURL() (string, error) {
	port, err := embedetcd.FreePort("127.0.0.1")
	return fmt.Sprintf("127.0.0.1:%d", port), err
}

func startCluster(binary string, sz size, procs, clients int) (*cluster, error) {
	dir, err := os.MkdirTemp("", "bench-scale-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, label: sz.label}
	if c.logs, err = os.Create(filepath.Join(dir, "log")); err != nil {
		return nil, err
	}
	addrs := make([]string, 4)
	for i := range addrs {
		if addrs[i], err = freeURL(); err != nil {
			return nil, err
		}
	}
	c.endpoint, c.etcdMetrics, c.serveMetrics = "http://"+addrs[0], "http://"+addrs[2]+"/metrics", "http://"+addrs[3]+"/metrics"
	c.etcd = c.spawn(binary, "etcd", "--data-dir", filepath.Join(dir, "etcd"), "--listen-client-urls", c.endpoint,
		"--listen-peer-urls", "http://"+addrs[1], "--listen-metrics-urls", "http://"+addrs[2])
	if c.cli, err = etcdclient.New(etcdclient.Config{Endpoints: []string{c.endpoint}}); err != nil {
		return nil, err
	}
	if err := waitFor(30*time.Second, func() bool { _, err := scrape(c.etcdMetrics); return err == nil }); err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	if out, err := exec.Command(binary, "scale", "--etcd-endpoints", c.endpoint, "--job", job, "--np", strconv.Itoa(sz.nodes), "--create").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("scale: %v: %s", err, out)
	}
	c.serve = c.spawn(binary, "serve", "--etcd-endpoints", c.endpoint, "--listen-metrics", addrs[3], "--log-level", "warn")
	if err := waitFor(30*time.Second, func() bool { _, err := scrape(c.serveMetrics); return err == nil }); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	for range procs {
		a := &agentProc{lost: make(chan report, 1)}
		a.cmd = exec.Command(self, "-agents", c.endpoint, "-clients", strconv.Itoa(clients), "-ttl", sz.ttl.String(),
			"-nproc", strconv.Itoa(sz.nproc))
		a.cmd.Stderr = c.logs
		stdout, err := a.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if a.stdin, err = a.cmd.StdinPipe(); err != nil {
			return nil, err
		}
		if err := a.cmd.Start(); err != nil {
			return nil, err
		}
		a.enc = json.NewEncoder(a.stdin)
		go a.read(stdout)
		c.agents = append(c.agents, a)
	}
	return c, nil
}

func (a *agentProc) read(r io.Reader) {
	in := bufio.NewScanner(r)
	for in.Scan() {
		var rep report
		if json.Unmarshal(in.Bytes(), &rep) != nil {
			continue
		}
		a.mu.Lock()
		switch {
		case rep.Err != "":
			a.errors = append(a.errors, rep.Err)
		case rep.Lost != "":
			a.lost <- rep
		default:
			a.last = rep
		}
		a.mu.Unlock()
	}
}

func (a *agentProc) send(c command) error { return a.enc.Encode(c) }

func (c *cluster) spawn(binary string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = c.logs, c.logs
	if err := cmd.Start(); err != nil {
		fatalf("start %v: %v", args, err)
	}
	return cmd
}

func (c *cluster) close() {
	for _, a := range c.agents {
		_ = a.send(command{Op: "quit"})
		_ = a.stdin.Close()
		done := make(chan struct{})
		go func() { _ = a.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = a.cmd.Process.Kill()
			<-done
		}
	}
	for _, p := range []*exec.Cmd{c.serve, c.etcd} {
		if p != nil {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
	}
	if c.cli != nil {
		_ = c.cli.Close()
	}
	_ = c.logs.Close()
	if keepLogs != "" {
		_ = os.MkdirAll(keepLogs, 0o755)
		_ = os.Rename(filepath.Join(c.dir, "log"), filepath.Join(keepLogs, fmt.Sprintf("%s.log", c.label)))
	}
	_ = os.RemoveAll(c.dir)
}

// state sums the agents' reports: nodes registered, and the nodes running
// the newest generation any agent saw started, with the last start.
func (c *cluster) restarts() int {
	n := 0
	for _, a := range c.agents {
		a.mu.Lock()
		n += a.last.Restarts
		a.mu.Unlock()
	}
	return n
}

func (c *cluster) state() (registered int, gen int64, running int, last time.Time, errs []string) {
	var reps []report
	for _, a := range c.agents {
		a.mu.Lock()
		reps = append(reps, a.last)
		errs = append(errs, a.errors...)
		a.mu.Unlock()
	}
	for _, r := range reps {
		registered += r.Registered
		gen = max(gen, r.Generation)
	}
	for _, r := range reps {
		if r.Generation == gen {
			running += r.Running
			if t := time.Unix(0, r.Last); t.After(last) {
				last = t
			}
		}
	}
	return registered, gen, running, last, errs
}

// waitRunning waits for n nodes to run a generation above after and
// returns it with the time the last of them started.
func (c *cluster) waitRunning(after int64, n int, timeout time.Duration) (int64, time.Time, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		_, gen, running, last, errs := c.state()
		if len(errs) > 0 {
			return 0, time.Time{}, fmt.Errorf("agents: %s", errs[0])
		}
		if gen > after && running == n {
			return gen, last, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	reg, gen, running, _, _ := c.state()
	return 0, time.Time{}, fmt.Errorf("not %d running after %s: %d registered, %d running generation %d", n, timeout, reg, running, gen)
}

// processStat is a process's CPU time so far and its peak resident memory.
func processStat(pid int) (cpu time.Duration, peakRSS int64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(fields) > 12 {
			u, _ := strconv.ParseInt(fields[11], 10, 64)
			k, _ := strconv.ParseInt(fields[12], 10, 64)
			cpu = time.Duration(u+k) * 10 * time.Millisecond // USER_HZ is 100
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				peakRSS = kb << 10
			}
		}
	}
	return cpu, peakRSS
}

// scrape reads a Prometheus text endpoint into sums by metric name (the
// series of a name summed over their labels).
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	in := bufio.NewScanner(resp.Body)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		line := in.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		name := line[:sp]
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, in.Err()
}

func waitFor(timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if ok() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %s", timeout)
}
