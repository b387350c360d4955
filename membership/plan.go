package membership

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Phase is the phase of a plan generation.
type Phase string

// Plan phases.
const (
	// PhaseStop: every node that ran a process of an earlier generation
	// stops it and acks NodeStopped with the plan's generation.
	PhaseStop Phase = "stop"
	// PhaseRun: the members start their processes with the plan's rank
	// table and ack NodeRunning.
	PhaseRun Phase = "run"
)

// Member is one node's place in a generation.
type Member struct {
	Node string `json:"node"`
	Role Role   `json:"role"`
	// Rank is the node's rank within its role.
	Rank int `json:"rank"`
	// GlobalRank is the global rank of the node's first process; the
	// process with local rank l has GlobalRank+l. Counted within the role.
	GlobalRank int    `json:"globalRank"`
	Host       string `json:"host"`
	Ports      []int  `json:"ports"`
	NProc      int    `json:"nproc"`
	// Lease is the lease the node held when the table was made. A node seen
	// under another lease has restarted and lost its processes since.
	Lease int64 `json:"lease"`
}

// Endpoints are host:port for each of the member's processes.
func (m Member) Endpoints() []string { return endpoints(m.Host, m.Ports) }

// Plan is a job's current generation, stored at Keys.Plan and written only by
// the coordinator leader in a transaction fenced on its election key.
type Plan struct {
	Generation int64 `json:"generation"`
	Phase      Phase `json:"phase"`
	// Members is, in phase run, the rank table to start. In phase stop it is
	// the rank table of the previous run: the nodes that must ack the stop,
	// and the ranks that survivors keep. The coordinator does not store it
	// in the record but names it in Table (and Delta); a reader resolves it
	// with a TableSource. A record without Table carries it inline.
	Members []Member `json:"members,omitempty"`
	// Table names the stored rank table that Members is.
	Table *TableRef `json:"table,omitempty"`
	// Delta, in phase run, turns the previous run's table into this one.
	Delta *TableDeltaRef `json:"delta,omitempty"`
	// WorldSize is the number of worker processes in phase run.
	WorldSize int `json:"worldSize,omitempty"`
	// Master is host:port of the rank-0 worker's rendezvous store.
	Master string `json:"master,omitempty"`
	// Gloo is host:port of PaddlePaddle's gloo HTTP store in a job with
	// parameter servers: the first server starts it, on its node's master
	// port, which it has no other use for.
	Gloo string `json:"gloo,omitempty"`
	// Restarts counts the restarts the job has spent of its budget;
	// MaxRestarts is the budget.
	Restarts    int `json:"restarts"`
	MaxRestarts int `json:"maxRestarts"`
	// Interruptions counts the generations a fault started: a member that
	// failed or was lost (its pod deleted, its machine gone), charged to
	// the budget or not. What a user counts as the job's restarts.
	Interruptions int `json:"interruptions,omitempty"`
	// Reason says why this generation exists.
	Reason string `json:"reason"`
	// Excluded lists nodes kept out of the next run while other nodes can
	// take their place (fault tolerance level 2).
	Excluded []string `json:"excluded,omitempty"`
	// Failure, in phase stop, is the process failure that caused it. It is
	// charged to the restart budget when the phase ends, and only if no
	// member was lost meanwhile: a member that dies makes its peers'
	// collectives fail before its lease expires.
	Failure *Failure `json:"failure,omitempty"`
	// Hang, in phase stop, is the hung rank that caused it, charged to the
	// hang budget when the phase ends (as Failure is to MaxRestarts): the
	// sidecars write every rank's stack and kill without a grace period,
	// since a rank blocked in a collective cannot act on SIGTERM.
	Hang *Hang `json:"hang,omitempty"`
	// HangRestarts counts the restarts hangs spent of MaxHangRestarts.
	HangRestarts    int `json:"hangRestarts,omitempty"`
	MaxHangRestarts int `json:"maxHangRestarts,omitempty"`
	// Hangs counts, by node, the hangs its ranks caused: a node whose
	// ranks hang again is excluded as a failed node is.
	Hangs map[string]int `json:"hangs,omitempty"`
	// Watch is how the run's ranks are watched for hangs; nil: not at all.
	Watch *HangWatch `json:"watch,omitempty"`
	// Result is set on the last plan of a finished job: every sidecar stops
	// its processes and exits, 0 when Result is JobSucceeded and ExitCode
	// otherwise.
	Result   JobPhase `json:"result,omitempty"`
	ExitCode int      `json:"exitCode,omitempty"`
	// Timestamps of the generation's steps.
	DetectedAt time.Time `json:"detectedAt"`
	StopAt     time.Time `json:"stopAt,omitzero"`
	AckedAt    time.Time `json:"ackedAt,omitzero"`
	RunAt      time.Time `json:"runAt,omitzero"`

	// table is the resolved Table, when Members came from one: it indexes
	// the members by node.
	table *Table
}

// AttachTable sets the plan's members to t's.
func (p *Plan) AttachTable(t *Table) {
	p.Members, p.table = t.Members, t
}

// RankTable is the table attached to p, nil when none was.
func (p Plan) RankTable() *Table { return p.table }

// Unresolved reports whether p names a table that is not attached yet.
func (p Plan) Unresolved() bool { return p.Table != nil && p.table == nil }

// Failure is the first process failure reported in a generation.
type Failure struct {
	Node     string `json:"node"`
	Role     Role   `json:"role"`
	Rank     int    `json:"rank"`
	ExitCode int    `json:"exitCode"`
}

// Final reports whether p ends the job.
func (p Plan) Final() bool { return p.Result != "" }

// Member returns the entry of node in p.Members.
func (p Plan) Member(node string) (Member, bool) {
	if p.table != nil {
		return p.table.Member(node)
	}
	for _, m := range p.Members {
		if m.Node == node {
			return m, true
		}
	}
	return Member{}, false
}

// Validate reports the first inconsistency in p.
func (p Plan) Validate() error {
	if p.Generation < 1 {
		return fmt.Errorf("plan: generation %d: want >= 1", p.Generation)
	}
	if p.Phase != PhaseStop && p.Phase != PhaseRun {
		return fmt.Errorf("plan: unknown phase %q", p.Phase)
	}
	if p.Restarts < 0 || p.HangRestarts < 0 {
		return fmt.Errorf("plan: negative restart count %d or %d", p.Restarts, p.HangRestarts)
	}
	if h := p.Hang; h != nil {
		if err := h.Validate(); err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		if p.Phase != PhaseStop || h.Node == "" {
			return fmt.Errorf("plan: a hang belongs to phase stop, with a node")
		}
	}
	switch p.Result {
	case "", JobSucceeded, JobFailed:
	default:
		return fmt.Errorf("plan: result %q: want %s or %s", p.Result, JobSucceeded, JobFailed)
	}
	if p.Table != nil {
		if err := p.Table.Validate(p.Generation); err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		if len(p.Members) > 0 && p.table == nil {
			return fmt.Errorf("plan: members both inline and in a table")
		}
	} else if p.Delta != nil {
		return fmt.Errorf("plan: a delta without a table")
	}
	if p.Delta != nil && (p.Phase != PhaseRun || !digestPattern.MatchString(p.Delta.Base)) {
		return fmt.Errorf("plan: a delta belongs to phase run, with a base digest")
	}
	type slot struct {
		role Role
		rank int
	}
	seenNode := make(map[string]bool, len(p.Members))
	seenRank := make(map[slot]bool, len(p.Members))
	for _, m := range p.Members {
		if err := ValidateNodeID(m.Node); err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		if _, err := ParseRole(string(m.Role)); err != nil {
			return fmt.Errorf("plan: member %s: %w", m.Node, err)
		}
		if seenNode[m.Node] {
			return fmt.Errorf("plan: member %s listed twice", m.Node)
		}
		seenNode[m.Node] = true
		s := slot{m.Role, m.Rank}
		if m.Rank < 0 || seenRank[s] {
			return fmt.Errorf("plan: member %s: rank %d of role %s is negative or taken", m.Node, m.Rank, m.Role)
		}
		seenRank[s] = true
		if m.NProc < 1 || m.NProc > MaxNProc || len(m.Ports) != m.NProc || m.GlobalRank < 0 {
			return fmt.Errorf("plan: member %s: %d ports for %d processes at global rank %d", m.Node, len(m.Ports), m.NProc, m.GlobalRank)
		}
	}
	if f := p.Failure; f != nil {
		if err := ValidateNodeID(f.Node); err != nil {
			return fmt.Errorf("plan: failure: %w", err)
		}
		if p.Phase != PhaseStop || f.Rank < 0 {
			return fmt.Errorf("plan: a failure belongs to phase stop, with a rank >= 0")
		}
	}
	return p.validateAddresses()
}

func (p Plan) validateAddresses() error {
	for _, a := range []struct{ name, addr string }{{"master", p.Master}, {"gloo", p.Gloo}} {
		if a.addr == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("plan: %s %q: %v", a.name, a.addr, err)
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("plan: %s %q: bad port", a.name, a.addr)
		}
	}
	return nil
}

// DecodePlan reads a plan record.
func DecodePlan(data []byte) (Plan, error) {
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return Plan{}, fmt.Errorf("%w: plan: %v", ErrInvalidRecord, err)
	}
	if err := p.Validate(); err != nil {
		return Plan{}, fmt.Errorf("%w: %v", ErrInvalidRecord, err)
	}
	return p, nil
}

// Endpoints are the addresses of a generation's roles, as every framework's
// environment lists them.
type Endpoints struct {
	// Trainers are the worker processes' host:port in global rank order;
	// TrainerHosts the worker nodes' hosts in rank order.
	Trainers     []string
	TrainerHosts []string
	// PServers are the PS nodes' first host:port in rank order.
	PServers []string
	// Heters are the heterogeneous trainers' host:port, every process's,
	// in rank order.
	Heters []string
	// MasterAddr and MasterPort serve the rank-0 rendezvous store.
	MasterAddr string
	MasterPort int
	// Gloo is host:port of PaddlePaddle's gloo HTTP store ("" without
	// parameter servers).
	Gloo string
	// SchedulerAddr and SchedulerPort are the scheduler node's first
	// endpoint, or the master when the job has no scheduler.
	SchedulerAddr string
	SchedulerPort int
	// Nodes and Processes count each role's members and processes.
	Nodes     map[Role]int
	Processes map[Role]int
}

// Endpoints collects the addresses of p's members.
func (p Plan) Endpoints() Endpoints {
	e := Endpoints{Nodes: map[Role]int{}, Processes: map[Role]int{}}
	if host, port, err := net.SplitHostPort(p.Master); err == nil {
		e.MasterAddr = host
		e.MasterPort, _ = strconv.Atoi(port)
	}
	e.SchedulerAddr, e.SchedulerPort = e.MasterAddr, e.MasterPort
	e.Gloo = p.Gloo
	for _, m := range p.Members {
		e.Nodes[m.Role]++
		e.Processes[m.Role] += m.NProc
		switch m.Role {
		case RoleWorker:
			e.Trainers = append(e.Trainers, m.Endpoints()...)
			e.TrainerHosts = append(e.TrainerHosts, m.Host)
		case RolePS:
			e.PServers = append(e.PServers, m.Endpoints()[0])
		case RoleHeter:
			e.Heters = append(e.Heters, m.Endpoints()...)
		case RoleScheduler:
			e.SchedulerAddr, e.SchedulerPort = m.Host, m.Ports[0]
		}
	}
	return e
}
