package simnode

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
	"github.com/elastictraining/coordinator/sidecar"
)

// Workload is an in-memory stand-in for a node's training processes. It
// records every assignment it was started with and exits when told to.
type Workload struct {
	mu      sync.Mutex
	current chan sidecar.Exit
	starts  []sidecar.Assignment
	changed chan struct{}
	stuck   chan struct{} // while set, Stop hangs until it is closed
	// stopping is closed when a Stop begins to hang on stuck.
	stopping chan struct{}
	lease    int64 // the lease of the last deadline; 0 after a kill
	marks    *membership.StepMarks
	// cold is what Cold says, until SetCold changes it and closes
	// warmth.
	cold   bool
	warmth chan struct{}
}

var (
	_ sidecar.Workload = (*Workload)(nil)
	_ sidecar.Marker   = (*Workload)(nil)
	_ sidecar.Warmer   = (*Workload)(nil)
)

// SetCold says whether the node's next start would be cold, as a real
// node's launcher does when its guard's warm interpreters die or are
// ready again.
func (w *Workload) SetCold(cold bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cold = cold
	w.warmthLocked()
	close(w.warmth)
	w.warmth = make(chan struct{})
}

// Cold implements sidecar.Warmer: warm (false) unless SetCold said
// otherwise.
func (w *Workload) Cold() (bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cold, w.warmthLocked()
}

func (w *Workload) warmthLocked() chan struct{} {
	if w.warmth == nil {
		w.warmth = make(chan struct{})
	}
	return w.warmth
}

// SetMarks makes m the step marks the workload's ranks left, as a real
// node's guard reads them from its ranks' pages.
func (w *Workload) SetMarks(m membership.StepMarks) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marks = &m
}

// StepMarks implements sidecar.Marker.
func (w *Workload) StepMarks(gen int64) *membership.StepMarks {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.marks == nil || w.marks.Generation != gen {
		return nil
	}
	m := *w.marks
	return &m
}

// NewWorkload returns an idle workload.
func NewWorkload() *Workload { return &Workload{changed: make(chan struct{})} }

// Start implements sidecar.Workload.
func (w *Workload) Start(_ context.Context, a sidecar.Assignment) (<-chan sidecar.Exit, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.current != nil {
		return nil, fmt.Errorf("simnode: started while generation %d runs", w.starts[len(w.starts)-1].Plan.Generation)
	}
	if a.Member.Lease != w.lease {
		return nil, fmt.Errorf("simnode: assignment for lease %x, not the current %x", a.Member.Lease, w.lease)
	}
	w.current = make(chan sidecar.Exit, 1)
	w.starts = append(w.starts, a)
	w.notifyLocked()
	return w.current, nil
}

// Stop implements sidecar.Workload.
func (w *Workload) Stop(ctx context.Context, _ time.Duration) error {
	w.mu.Lock()
	stuck := w.stuck
	if stuck != nil {
		select {
		case <-w.stopping:
		default:
			close(w.stopping)
		}
	}
	w.mu.Unlock()
	if stuck != nil {
		select {
		case <-stuck:
		case <-ctx.Done():
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.current = nil
	w.notifyLocked()
	return nil
}

// Kill implements sidecar.Workload. It ends a Hang, as the guard's SIGKILL
// ends a process that ignores SIGTERM.
func (w *Workload) Kill(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stuck != nil {
		close(w.stuck)
		w.stuck = nil
	}
	w.current, w.lease = nil, 0
	w.notifyLocked()
	return nil
}

// Pids implements sidecar.Workload: a simulated node has no processes.
func (w *Workload) Pids() []int { return nil }

// SetDeadline implements sidecar.Workload; the deadline itself is not
// simulated.
func (w *Workload) SetDeadline(lease int64, _ time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lease = lease
}

// Hang makes Stop hang, as a process that ignores SIGTERM and cannot be
// reaped would, until the returned function is called.
func (w *Workload) Hang() (release func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	stuck := make(chan struct{})
	w.stuck, w.stopping = stuck, make(chan struct{})
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.stuck == stuck {
			close(stuck)
			w.stuck = nil
		}
	}
}

// Stopping returns a channel closed once a Stop hangs on the last Hang;
// nil (never ready) before any Hang.
func (w *Workload) Stopping() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopping
}

// Exit makes the running workload exit with code, as a child process
// would. It reports false when nothing runs.
func (w *Workload) Exit(code int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.current == nil {
		return false
	}
	w.current <- sidecar.Exit{Code: code, Message: fmt.Sprintf("simulated exit %d", code)}
	w.current = nil
	w.notifyLocked()
	return true
}

// Running returns the assignment of the running workload.
func (w *Workload) Running() (sidecar.Assignment, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.current == nil {
		return sidecar.Assignment{}, false
	}
	return w.starts[len(w.starts)-1], true
}

// Starts returns every assignment the workload was started with.
func (w *Workload) Starts() []sidecar.Assignment {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]sidecar.Assignment(nil), w.starts...)
}

// Changed returns a channel closed at the next start, stop or exit.
func (w *Workload) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

func (w *Workload) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// Config describes a simulated node.
type Config struct {
	Client *clientv3.Client
	Keys   membership.Keys
	Job    string
	ID     string
	Role   membership.Role
	// Port is the node's first endpoint port; any valid port will do, as
	// nothing listens.
	Port  int
	NProc int
	TTL   time.Duration
	Spec  *membership.Spec
	// Host is the address it advertises, 127.0.0.1 if empty; Pod and
	// PodUID name the Kubernetes pod it stands in for, if any.
	Host, Pod, PodUID string
	// Tables shares decoded rank tables between the nodes of a process.
	Tables *membership.TableCache
	// Logger is silent if nil.
	Logger hclog.Logger
	// Notes hears what the agent says for a person (sidecar.Config.Notes).
	Notes io.Writer
	// Started is when its sidecar says it started (membership.Node).
	Started time.Time
}

// Node is a running simulated node.
type Node struct {
	ID       string
	Workload *Workload
	agent    *sidecar.Agent
	cancel   context.CancelFunc
	done     chan struct{}
	result   sidecar.Result
	err      error
}

// Start runs a simulated node until it leaves, crashes or its job ends. A
// node still running when the test ends leaves then.
func Start(tb testing.TB, cfg Config) *Node {
	tb.Helper()
	n, err := Launch(cfg)
	if err != nil {
		tb.Fatalf("start simulated node %s: %v", cfg.ID, err)
	}
	tb.Cleanup(n.Leave)
	return n
}

// Launch is Start without a test.
func Launch(cfg Config) (*Node, error) {
	if cfg.Role == "" {
		cfg.Role = membership.RoleWorker
	}
	if cfg.NProc == 0 {
		cfg.NProc = 1
	}
	if cfg.Port == 0 {
		cfg.Port = 20000
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	ports := make([]int, cfg.NProc)
	for i := range ports {
		ports[i] = cfg.Port + 1 + i
	}
	w := NewWorkload()
	agent, err := sidecar.New(sidecar.Config{
		Place: presence.Place{Client: cfg.Client, Keys: cfg.Keys, Job: cfg.Job, TTL: cfg.TTL,
			Node: membership.Node{ID: cfg.ID, Role: cfg.Role, Host: cfg.Host, Ports: ports, NProc: cfg.NProc, MasterPort: cfg.Port,
				Pod: cfg.Pod, PodUID: cfg.PodUID, Started: cfg.Started}},
		Spec: cfg.Spec, Workload: w, Logger: cfg.Logger, Tables: cfg.Tables, Notes: cfg.Notes,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{ID: cfg.ID, Workload: w, agent: agent, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		n.result, n.err = agent.Run(ctx)
	}()
	return n, nil
}

// Leave stops the node gracefully: its lease is revoked at once.
func (n *Node) Leave() {
	n.cancel()
	<-n.done
}

// Crash stops the node as a SIGKILL would: its lease is left to expire.
func (n *Node) Crash() {
	n.agent.Abandon()
	<-n.done
	n.cancel()
}

// Registration is the node's registration, nil until it registered.
func (n *Node) Registration() *presence.Registration { return n.agent.Registration() }

// Fence is the node's answer to a process of generation that stores for
// the job (sidecar.Agent.Fence).
func (n *Node) Fence(generation int64) error { return n.agent.Fence(generation) }

// Done is closed when the node has stopped.
func (n *Node) Done() <-chan struct{} { return n.done }

// Result waits for the node to stop and returns how its job ended.
func (n *Node) Result() (sidecar.Result, error) {
	<-n.done
	return n.result, n.err
}
