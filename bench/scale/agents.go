package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
	"github.com/elastictraining/coordinator/sidecar"
)

// command is what the harness tells an agent process, one JSON line each.
type command struct {
	Op string `json:"op"` // join, lose, quit
	// IDs are the nodes to start (join).
	IDs []string `json:"ids,omitempty"`
}

// report is what an agent process tells the harness, one JSON line each:
// how many of its nodes run the newest generation it has seen started, and
// when the last of them started; and, after a lose, which node it lost when.
type report struct {
	Registered int    `json:"registered"`
	Restarts   int    `json:"restarts"`
	Generation int64  `json:"generation"`
	Running    int    `json:"running"`
	Last       int64  `json:"last"` // unix nanoseconds
	Lost       string `json:"lost,omitempty"`
	LostAt     int64  `json:"lostAt,omitempty"`
	Err        string `json:"err,omitempty"`
}

// tally counts the starts of the process's nodes by generation.
type tally struct {
	mu         sync.Mutex
	registered int
	restarts   int // sidecars that failed and were started again
	started    map[int64]int
	last       map[int64]time.Time
	changed    chan struct{}
}

func (t *tally) start(gen int64) {
	t.mu.Lock()
	t.started[gen]++
	if now := time.Now(); now.After(t.last[gen]) {
		t.last[gen] = now
	}
	t.mu.Unlock()
	t.poke()
}

func (t *tally) poke() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

func (t *tally) report() report {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := report{Registered: t.registered, Restarts: t.restarts}
	for gen := range t.started {
		r.Generation = max(r.Generation, gen)
	}
	r.Running, r.Last = t.started[r.Generation], t.last[r.Generation].UnixNano()
	return r
}

// workload stands in for a node's training processes and keeps nothing of
// the plan: it counts the start and hands back an exit channel that never
// fires.
type workload struct {
	t    *tally
	mu   sync.Mutex
	exit chan sidecar.Exit
}

var _ sidecar.Workload = (*workload)(nil)

func (w *workload) Start(_ context.Context, a sidecar.Assignment) (<-chan sidecar.Exit, error) {
	w.mu.Lock()
	w.exit = make(chan sidecar.Exit)
	w.mu.Unlock()
	w.t.start(a.Plan.Generation)
	return w.exit, nil
}

func (w *workload) started() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.exit != nil
}

func (w *workload) Stop(context.Context, time.Duration) error { return nil }
func (w *workload) Kill(context.Context) error                { return nil }
func (w *workload) SetDeadline(int64, time.Time)              {}
func (w *workload) Pids() []int                               { return nil }

// agentNode is one simulated node of the process.
type agentNode struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}
	w      *workload

	mu    sync.Mutex
	agent *sidecar.Agent // the sidecar as last (re)started
}

func (n *agentNode) currentAgent() *sidecar.Agent {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.agent
}

func (n *agentNode) setAgent(a *sidecar.Agent) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.agent = a
}

// runAgents is the agent process: it starts the nodes it is told to, on a
// few shared etcd clients, and reports their starts until told to quit.
func runAgents(endpoint string, clients int, ttl time.Duration, nproc int) error {
	var cli []*clientv3.Client
	for range clients {
		c, err := etcdclient.New(etcdclient.Config{Endpoints: []string{endpoint}})
		if err != nil {
			return err
		}
		defer c.Close()
		cli = append(cli, c)
	}
	t := &tally{started: map[int64]int{}, last: map[int64]time.Time{}, changed: make(chan struct{}, 1)}
	tables := &membership.TableCache{}
	out := json.NewEncoder(os.Stdout)
	var outMu sync.Mutex
	send := func(r report) {
		outMu.Lock()
		defer outMu.Unlock()
		_ = out.Encode(r)
	}
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var last report
		for {
			select {
			case <-stop:
				return
			case <-t.changed:
			case <-tick.C:
			}
			if r := t.report(); r != last {
				send(r)
				last = r
			}
		}
	}()
	defer close(stop)

	var nodes []*agentNode
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			return fmt.Errorf("command: %w", err)
		}
		switch c.Op {
		case "join":
			for _, id := range c.IDs {
				n, err := startNode(cli[len(nodes)%len(cli)], id, ttl, nproc, t, tables)
				if err != nil {
					send(report{Err: err.Error()})
					continue
				}
				nodes = append(nodes, n)
			}
		case "lose":
			lost, at, err := loseOne(nodes, cli[0])
			if err != nil {
				send(report{Err: err.Error()})
				continue
			}
			send(report{Lost: lost, LostAt: at.UnixNano()})
		case "quit":
			for _, n := range nodes {
				if n != nil {
					n.cancel()
				}
			}
			for _, n := range nodes {
				if n != nil {
					<-n.done
				}
			}
			return nil
		}
	}
	return in.Err()
}

func newAgent(cli *clientv3.Client, id string, ttl time.Duration, nproc int, w *workload, tables *membership.TableCache) (*sidecar.Agent, error) {
	ports := make([]int, nproc)
	for i := range ports {
		ports[i] = 6170 + i
	}
	return sidecar.New(sidecar.Config{
		Place: presence.Place{Client: cli, Job: job, TTL: ttl,
			Node: membership.Node{ID: id, Role: membership.RoleWorker, Host: "10.0.0.1", Ports: ports, NProc: nproc, MasterPort: 6169}},
		Workload: w, Tables: tables, StopGrace: time.Second,
	})
}

func startNode(cli *clientv3.Client, id string, ttl time.Duration, nproc int, t *tally, tables *membership.TableCache) (*agentNode, error) {
	w := &workload{t: t}
	agent, err := newAgent(cli, id, ttl, nproc, w, tables)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &agentNode{id: id, agent: agent, cancel: cancel, done: make(chan struct{}), w: w}
	go func() {
		defer close(n.done)
		for {
			_, err := agent.Run(ctx)
			if err == nil || ctx.Err() != nil || errors.Is(err, sidecar.ErrLeft) {
				return // the job ended, the node left, or it was lost on purpose
			}
			// A sidecar that fails exits, and its pod restarts it.
			fmt.Fprintf(os.Stderr, "sidecar %s failed: %v\n", id, err)
			t.mu.Lock()
			t.restarts++
			t.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			if agent, err = newAgent(cli, id, ttl, nproc, w, tables); err != nil {
				return
			}
			n.setAgent(agent)
		}
	}()
	go func() {
		for n.currentAgent().Registration() == nil {
			select {
			case <-n.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		t.mu.Lock()
		t.registered++
		t.mu.Unlock()
		t.poke()
	}()
	return n, nil
}

// loseOne takes a node that runs out of the job as a failed pod goes: its
// sidecar is gone without a word, and its lease is revoked (what the
// Kubernetes bridge does for a pod that failed).
func loseOne(nodes []*agentNode, cli *clientv3.Client) (string, time.Time, error) {
	for i, n := range nodes {
		if n == nil || !n.w.started() {
			continue
		}
		agent := n.currentAgent()
		reg := agent.Registration()
		if reg == nil {
			continue
		}
		lease := reg.Lease()
		agent.Abandon()
		<-n.done
		n.cancel()
		at := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cli.Revoke(ctx, lease); err != nil {
			return "", at, fmt.Errorf("revoke %s: %w", n.id, err)
		}
		nodes[i] = nil // gone
		return n.id, at, nil
	}
	return "", time.Time{}, fmt.Errorf("no running node to lose")
}
