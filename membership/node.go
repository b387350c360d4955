package membership

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Role is what a node does in a job.
type Role string

// Roles of a node.
const (
	RoleWorker    Role = "worker"
	RolePS        Role = "ps"
	RoleScheduler Role = "scheduler"
	// RoleHeter is PaddlePaddle's heterogeneous parameter-server trainer.
	RoleHeter Role = "heter"
)

// ParseRole checks that s names a role.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleWorker, RolePS, RoleScheduler, RoleHeter:
		return r, nil
	}
	return "", fmt.Errorf("role %q: want worker, ps, scheduler or heter", s)
}

// NodeState is what a node's sidecar last reported about its processes.
type NodeState string

// Node states. Only a node in NodeRunning, NodeSucceeded, NodeFailed or
// NodeLeaving can have a process of its generation left; a node in
// NodeWaiting or NodeStopped has none.
const (
	// NodeWaiting: registered, never started a process under this lease.
	NodeWaiting NodeState = "waiting"
	// NodeStopped: every process stopped for Generation (the ack of a stop).
	NodeStopped NodeState = "stopped"
	// NodeRunning: processes of Generation started (the ack of a run).
	NodeRunning NodeState = "running"
	// NodeSucceeded: every process of Generation exited 0.
	NodeSucceeded NodeState = "succeeded"
	// NodeFailed: a process of Generation failed; ExitCode says how.
	NodeFailed NodeState = "failed"
	// NodeLeaving: the sidecar is leaving the job (SIGTERM, a preemption)
	// and stops its processes; it revokes its lease once they are gone.
	// Failures of its peers from then on are explained by its leaving.
	NodeLeaving NodeState = "leaving"
)

// MaxNProc is the largest number of processes a node may run.
const MaxNProc = 1024

// Node is one node's record at Keys.Node, written by its sidecar under the
// sidecar's lease so that it disappears when the sidecar does.
type Node struct {
	// ID is the node id, the last segment of the key; stable across restarts
	// of the same pod.
	ID   string `json:"id"`
	Role Role   `json:"role"`
	// Host is the address other nodes reach this node at: a pod IP or a
	// Service name.
	Host string `json:"host"`
	// Ports holds one endpoint port per local process.
	Ports []int `json:"ports"`
	// NProc is the number of processes the node runs, len(Ports).
	NProc int `json:"nproc"`
	// MasterPort is where this node serves the rendezvous store
	// (MASTER_PORT) if it becomes rank 0.
	MasterPort int `json:"masterPort"`
	// Pod and PodUID name the Kubernetes pod, if any: a pod deleted under
	// that name evicts the node only if the UID matches, so a replacement
	// pod of the same name is never evicted for its predecessor.
	Pod    string    `json:"pod,omitempty"`
	PodUID string    `json:"podUID,omitempty"`
	State  NodeState `json:"state"`
	// Generation is the plan generation State refers to.
	Generation int64 `json:"generation"`
	// ExitCode is the exit code of a failed child (128+signal when it was
	// killed by a signal).
	ExitCode int    `json:"exitCode,omitempty"`
	Message  string `json:"message,omitempty"`
	// PIDs are, while State is running, the process ids of the node's
	// training processes in local rank order (one that exited is left
	// out), as the node's PID namespace (its pod's) numbers them: what a
	// person looks for in ps or py-spy.
	PIDs []int `json:"pids,omitempty"`
	// Began, while State is running and the node's trainers train in
	// place (run --in-place), says by local rank how each process began
	// the generation: "in place" (a survivor's process), "started spare"
	// (its start-up done ahead), "started spare, still starting", or
	// "cold: " and why. The leader's GenerationRunning event and `status`
	// say it per rank.
	Began []string `json:"began,omitempty"`
	// CannotStart, with State failed, says the training command could not
	// be started at all (not found, not executable): no restart mends
	// that, and the job fails without spending one.
	CannotStart bool `json:"cannotStart,omitempty"`
	// LeaseLosses counts the times this node's sidecar lost its lease and
	// fenced itself.
	LeaseLosses int64 `json:"leaseLosses,omitempty"`
	// Ordinal is the node's place in the workload that runs it, such as a
	// StatefulSet pod's ordinal, if it has one: a job that shrinks keeps
	// the nodes of the lowest ordinals, the ones the workload keeps.
	Ordinal *int `json:"ordinal,omitempty"`
	// Hang, while State is running, reports that one of the node's ranks
	// of Hang.Generation hung: the leader stops the generation.
	Hang *Hang `json:"hang,omitempty"`
	// Progress is how the node's slowest rank steps, while they run.
	Progress *RankProgress `json:"progress,omitempty"`
	// QuietUntil, while it is ahead, is the end of a long phase one of the
	// node's ranks declared (elastic.quiet): the other nodes' ranks wait
	// for it in a collective meanwhile, and are not hung.
	QuietUntil time.Time `json:"quietUntil,omitzero"`
	// Marks, when its Generation is the node's, are the times of the
	// generation's first and last steps on the node: what the leader
	// accounts the job's time by (Goodput).
	Marks *StepMarks `json:"marks,omitempty"`
	// Started is when the node's sidecar started, on its wall clock: a
	// sidecar registers only once its warm interpreters are ready, so a
	// job that waited for the node from then on waited for its start-up.
	Started time.Time `json:"started,omitzero"`
	// Checkpoint is host:port where the node's sidecar serves the job's
	// in-memory checkpoints to the other sidecars of the job (replicas,
	// and copies asked for by a node that has none); empty if it serves
	// none.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Cold says that the node's next start would be cold where it could
	// be warm: it runs with preloads, and not every one of its warm
	// interpreters has imported them (its guard died and the new one's
	// are importing, they were used and their replacements are not
	// ready, a preload failed). The next generation after a stop gives a
	// cold member's rank to a warm standby node when there is one for
	// every cold member, rather than wait for an import. A sidecar writes
	// it with its acks of a generation's end and of a stop, and on its
	// own only while it runs nothing: so it costs no write per
	// generation. Never set without preloads (nothing starts warm), nor
	// by a sidecar that predates it, whose node counts as warm.
	Cold bool `json:"cold,omitempty"`
	// Starting says that the node holds no rank and its trainer is being
	// started ahead, not ready yet (run --in-place: a started spare in
	// its start-up, as after the node's trainer failed). While np's
	// minimum is met without it, the node waits on standby: the job
	// trains on without it and grows when it is ready. Written as Cold is.
	Starting bool `json:"starting,omitempty"`
	// InPlace says that the node's trainers train in place (run
	// --in-place): a node that holds no rank and is neither Cold nor
	// Starting has a started spare, its trainer's start-up done.
	InPlace bool `json:"inPlace,omitempty"`
}

// StepMarks are the times, on the node's wall clock, of the first and
// last steps of a generation's ranks on one node. A node writes First
// once every one of its ranks has stepped in the generation, and Last
// with its ack of the generation's stop. Ranks that report no progress
// leave them unset.
type StepMarks struct {
	Generation int64 `json:"generation"`
	// First is the first step of the node's slowest rank to start.
	First time.Time `json:"first,omitzero"`
	// Resumed is the first step that rank named, at ResumedAt (0: it
	// named none).
	Resumed   int64     `json:"resumed,omitempty"`
	ResumedAt time.Time `json:"resumedAt,omitzero"`
	// Last is the last step of the node's most advanced rank; Furthest
	// the furthest step its ranks named (their count of steps where they
	// name none).
	Last     time.Time `json:"last,omitzero"`
	Furthest int64     `json:"furthest,omitempty"`
}

// Validate reports the first field of n that is out of range.
func (n Node) Validate() error {
	if err := ValidateNodeID(n.ID); err != nil {
		return err
	}
	if _, err := ParseRole(string(n.Role)); err != nil {
		return err
	}
	if n.Host == "" {
		return fmt.Errorf("node %s: host is empty", n.ID)
	}
	if n.NProc < 1 || n.NProc > MaxNProc {
		return fmt.Errorf("node %s: nproc %d: want 1..%d", n.ID, n.NProc, MaxNProc)
	}
	if len(n.Ports) != n.NProc {
		return fmt.Errorf("node %s: %d ports for %d processes", n.ID, len(n.Ports), n.NProc)
	}
	for _, p := range append([]int{n.MasterPort}, n.Ports...) {
		if p < 1 || p > 65535 {
			return fmt.Errorf("node %s: port %d out of range", n.ID, p)
		}
	}
	switch n.State {
	case NodeWaiting, NodeStopped, NodeRunning, NodeSucceeded, NodeFailed, NodeLeaving:
	default:
		return fmt.Errorf("node %s: unknown state %q", n.ID, n.State)
	}
	if n.Hang != nil {
		if err := n.Hang.Validate(); err != nil {
			return fmt.Errorf("node %s: %w", n.ID, err)
		}
	}
	if pr := n.Progress; pr != nil && (pr.Rank < 0 || pr.Step < 0 || pr.StepTime < 0 || pr.HangTimeout < 0) {
		return fmt.Errorf("node %s: progress out of range", n.ID)
	}
	if m := n.Marks; m != nil && (m.Generation < 1 || m.Resumed < 0 || m.Furthest < 0) {
		return fmt.Errorf("node %s: step marks out of range", n.ID)
	}
	if n.Checkpoint != "" {
		if err := validateHostPort(n.Checkpoint); err != nil {
			return fmt.Errorf("node %s: checkpoint address %q: %v", n.ID, n.Checkpoint, err)
		}
	}
	if n.Generation < 0 || n.LeaseLosses < 0 || (n.Ordinal != nil && *n.Ordinal < 0) {
		return fmt.Errorf("node %s: negative generation, lease losses or ordinal", n.ID)
	}
	return nil
}

// Endpoints are host:port for each local process, in local-rank order.
func (n Node) Endpoints() []string { return endpoints(n.Host, n.Ports) }

func endpoints(host string, ports []int) []string {
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = net.JoinHostPort(host, strconv.Itoa(p))
	}
	return out
}

// DecodeNode reads a node record.
func DecodeNode(data []byte) (Node, error) {
	var n Node
	if err := json.Unmarshal(data, &n); err != nil {
		return Node{}, fmt.Errorf("%w: node: %v", ErrInvalidRecord, err)
	}
	if err := n.Validate(); err != nil {
		return Node{}, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	return n, nil
}

// validateHostPort checks that addr is host:port with a host and a port in
// range.
func validateHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("no host")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q out of range", port)
	}
	return nil
}
