package printers

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// Node is one node as `status` shows it.
type Node struct {
	Node       string               `json:"node"`
	Role       membership.Role      `json:"role"`
	Rank       *int                 `json:"rank"` // nil on standby
	Host       string               `json:"host"`
	State      membership.NodeState `json:"state"`
	Generation int64                `json:"generation"`
	ExitCode   int                  `json:"exitCode"`
	// PIDs are the node's training processes while they run, by local
	// rank, as the node numbers them (its pod's PID namespace).
	PIDs []int `json:"pids,omitempty"`
	// Progress is how its slowest rank steps, while it runs; Hang its
	// report of a rank that hung in its generation.
	Progress *membership.RankProgress `json:"progress,omitempty"`
	Hang     *membership.Hang         `json:"hang,omitempty"`
	// Cold, on standby, says that the node's warm interpreters are not
	// ready: it takes a rank only when no warm node can.
	Cold bool `json:"cold,omitempty"`
	// Starting, on standby, says that the node's trainer is being started
	// ahead (its start-up); InPlace that its trainers train in place, so
	// that a warm one on standby is a started spare.
	Starting bool `json:"starting,omitempty"`
	InPlace  bool `json:"inPlace,omitempty"`
	// Began says, while it runs in place, how each of its processes began
	// the generation: in place, a started spare, or cold and why.
	Began []string `json:"began,omitempty"`
}

// Slowest is the job's slowest rank, of those whose nodes report their
// progress: a straggler, before it hangs.
type Slowest struct {
	Node string `json:"node"`
	Rank int    `json:"rank"`
	// Step is the job's step, or (StepCounted) the rank's process's own
	// count of its steps, when it names no step of the job.
	Step        int64   `json:"step"`
	StepCounted bool    `json:"stepCounted,omitempty"`
	StepTime    float64 `json:"stepSeconds"`
	// HangTimeout is the node's hang timeout in force, in seconds; 0 when
	// watching is off.
	HangTimeout float64 `json:"hangTimeoutSeconds"`
}

// Status is a job as `status` shows it, and as its JSON is read by
// scripts.
type Status struct {
	Head
	WorldSize int `json:"worldSize"`
	Restarts  int `json:"restarts"`
	// HangRestarts are those hung ranks spent.
	HangRestarts int `json:"hangRestarts,omitempty"`
	// Spares is how many spare workers the job keeps: its standby workers
	// are shown as spares.
	Spares      int                          `json:"spares,omitempty"`
	Slowest     *Slowest                     `json:"slowest,omitempty"`
	ExitCode    int                          `json:"exitCode"`
	Message     string                       `json:"message"`
	Malformed   string                       `json:"malformed,omitempty"`
	LastRestart *Steps                       `json:"lastRestart"`
	Goodput     *Goodput                     `json:"goodput,omitempty"`
	UpdatedAt   time.Time                    `json:"updatedAt"`
	Bridge      *membership.BridgeStatus     `json:"bridge,omitempty"`
	Autoscaler  *membership.AutoscalerStatus `json:"autoscaler,omitempty"`
	Nodes       []Node                       `json:"nodes"`
}

// NewStatus is the job's status without its name and nodes, its account
// read at the time of the call.
func NewStatus(job string, s membership.Status) Status {
	spares := 0
	if s.Spec != nil {
		spares = s.Spec.Spares
	}
	return Status{Head: headOf(job, s), WorldSize: s.WorldSize, Spares: spares,
		Restarts: s.Restarts, HangRestarts: s.HangRestarts, ExitCode: s.ExitCode, Message: StatusMessage(s), Malformed: s.Malformed, LastRestart: newSteps(s.Steps),
		Goodput: NewGoodput(s.Goodput, time.Now()), UpdatedAt: s.UpdatedAt, Nodes: []Node{}}
}

// StatusMessage is the status's message, and what of the job's records is
// malformed, where the tables and pages show a message.
func StatusMessage(s membership.Status) string {
	if s.Malformed == "" {
		return s.Message
	}
	bad := "malformed records, the last good values standing: " + s.Malformed
	if s.Message == "" {
		return bad
	}
	return s.Message + "; " + bad
}

// LoadStatus reads everything `status` shows of a job: its status, name,
// nodes, and the Kubernetes bridge's and the autoscaler's reports where
// there are any.
func LoadStatus(ctx context.Context, client *jobclient.Client, job string) (Status, error) {
	st, err := client.Status(ctx, job)
	if err != nil {
		return Status{}, err
	}
	view := NewStatus(job, st)
	if spec, err := client.Spec(ctx, job); err == nil {
		view.Name = spec.Name
	}
	if view.Nodes, err = LoadNodes(ctx, client, job); err != nil {
		return Status{}, err
	}
	view.Slowest = slowest(view.Nodes, st.Generation)
	if b, ok, err := client.Bridge(ctx, job); err == nil && ok {
		view.Bridge = &b
	}
	if a, ok, err := client.Autoscaler(ctx, job); err == nil && ok {
		view.Autoscaler = &a
	}
	return view, nil
}

// LoadNodes reads the job's nodes with their ranks in the running plan,
// in the order a person reads them (SortNodes).
func LoadNodes(ctx context.Context, client *jobclient.Client, job string) ([]Node, error) {
	nodes, err := client.Nodes(ctx, job)
	if err != nil {
		return nil, err
	}
	ranks := map[string]int{}
	if p, err := client.Plan(ctx, job); err == nil && p.Phase == membership.PhaseRun {
		for _, m := range p.Members {
			ranks[m.Node] = m.Rank
		}
	}
	out := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		v := Node{Node: n.ID, Role: n.Role, Host: n.Host, State: n.State, Generation: n.Generation, ExitCode: n.ExitCode, InPlace: n.InPlace}
		if r, ok := ranks[n.ID]; ok {
			v.Rank = &r
		} else {
			// A member's is written only with its acks: while it
			// runs, it says nothing.
			v.Cold, v.Starting = n.Cold, n.Starting
		}
		if n.State == membership.NodeRunning {
			v.PIDs, v.Progress, v.Hang, v.Began = n.PIDs, n.Progress, n.Hang, n.Began
		}
		out = append(out, v)
	}
	SortNodes(out)
	return out, nil
}

// slowest is the slowest rank of the generation's running nodes, nil when
// none reports its progress.
func slowest(nodes []Node, generation int64) *Slowest {
	var out *Slowest
	for _, n := range nodes {
		p := n.Progress
		if p == nil || n.Generation != generation || (out != nil && time.Duration(p.StepTime).Seconds() <= out.StepTime) {
			continue
		}
		out = &Slowest{Node: n.Node, Rank: p.Rank, Step: p.Step, StepCounted: p.Counted, StepTime: time.Duration(p.StepTime).Seconds(), HangTimeout: time.Duration(p.HangTimeout).Seconds()}
	}
	return out
}

// roleOrder is the order of the roles in a table of nodes: the workers,
// whose ranks a person looks for first, then the servers.
var roleOrder = map[membership.Role]int{membership.RoleWorker: 0, membership.RoleHeter: 1, membership.RolePS: 2, membership.RoleScheduler: 3}

// SortNodes orders nodes by role, then rank, standby nodes after the
// ranked ones, then by id with its numbers compared as numbers (w-2
// before w-10).
func SortNodes(nodes []Node) {
	slices.SortStableFunc(nodes, func(a, b Node) int {
		if c := cmp.Compare(roleOrder[a.Role], roleOrder[b.Role]); c != 0 {
			return c
		}
		switch {
		case a.Rank != nil && b.Rank != nil:
			if c := cmp.Compare(*a.Rank, *b.Rank); c != 0 {
				return c
			}
		case a.Rank != nil:
			return -1
		case b.Rank != nil:
			return 1
		}
		return naturalCompare(a.Node, b.Node)
	})
}

// naturalCompare compares strings with their runs of digits as numbers.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitsPrefix(a), digitsPrefix(b)
		if da != "" && db != "" {
			na, nb := strings.TrimLeft(da, "0"), strings.TrimLeft(db, "0")
			if c := cmp.Or(cmp.Compare(len(na), len(nb)), strings.Compare(na, nb)); c != 0 {
				return c
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitsPrefix(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// statusColumns are the status table's columns with the width a watch
// pads them to, so that rows printed one at a time line up.
var statusColumns = []struct {
	title string
	width int
}{{"JOB", 0}, {"PHASE", 10}, {"GENERATION", 10}, {"NP", 9}, {"NODES", 6}, {"READY", 6}, {"WORLD SIZE", 10}, {"RESTARTS", 12}, {"LAST RESTART", 12}, {"MESSAGE", 0}}

// StatusHeader are the titles of the status table's columns.
func StatusHeader() []string {
	out := make([]string, len(statusColumns))
	for i, c := range statusColumns {
		out[i] = c.title
	}
	return out
}

// StatusCells are the job's row of the status table: its name (its id
// when it has none), then a cell under each of StatusHeader.
func StatusCells(v Status) []string {
	took := "-"
	if v.LastRestart != nil {
		took = membership.Duration(time.Duration(v.LastRestart.Total * float64(time.Second))).String()
	}
	job := v.Job
	if v.Name != "" {
		job = v.Name
	}
	return []string{job, string(v.Phase), strconv.FormatInt(v.Generation, 10), v.NP.String(), strconv.Itoa(v.Members), strconv.Itoa(v.Ready),
		strconv.Itoa(v.WorldSize), RestartsCell(v.Restarts, v.HangRestarts), took, OrDash(v.Message)}
}

// Line is the slowest rank as `status` and the job's page say it: "rank
// 1 on node w-1, 21ms a step (median of its recent steps), at step 1234;
// hang timeout 5s".
func (s Slowest) Line() string {
	line := fmt.Sprintf("rank %d on node %s, %s a step (median of its recent steps), %s", s.Rank, s.Node,
		membership.Duration(time.Duration(s.StepTime*float64(time.Second))), membership.StepText("at", s.Step, s.StepCounted))
	if s.HangTimeout > 0 {
		line += fmt.Sprintf("; hang timeout %s", membership.Duration(time.Duration(s.HangTimeout*float64(time.Second))))
	}
	return line
}

// SparesLine says the job's spares as `status` and the job's page say
// them: "1 of 1 registered and warm, holding no rank", or, where trainers
// train in place, "1 of 1 started (its trainer's start-up done, waiting
// in elastic.run), holding no rank; 1 more starting".
func (v Status) SparesLine() string {
	ready, cold, starting, inPlace := 0, 0, 0, false
	for _, n := range v.Nodes {
		inPlace = inPlace || n.InPlace
		switch {
		case n.Rank != nil || n.Role != membership.RoleWorker || n.State == membership.NodeLeaving:
		case n.Starting:
			starting++
		case n.Cold:
			cold++
		default:
			ready++
		}
	}
	line := fmt.Sprintf("%d of %d registered and warm, holding no rank", ready, v.Spares)
	if inPlace {
		line = fmt.Sprintf("%d of %d started (the trainer's start-up done, waiting in elastic.run), holding no rank", ready, v.Spares)
	}
	if starting > 0 {
		line += fmt.Sprintf("; %d more registered, its trainer still starting", starting)
	}
	if cold > 0 {
		line += fmt.Sprintf("; %d more registered, cold", cold)
	}
	return line
}

// RestartsCell is a job's restarts as tables show them: those failures
// cost and those hung ranks cost, together, and how many hung: "3", "5 (2
// hung)".
func RestartsCell(restarts, hang int) string {
	if hang == 0 {
		return strconv.Itoa(restarts)
	}
	return fmt.Sprintf("%d (%d hung)", restarts+hang, hang)
}

// RankCell is a node's rank as tables and pages show it: its rank, or, for
// a node that holds none, "spare" (a worker of a job that keeps spares) or
// "standby", and "(cold)" if its next start would be cold.
func (v Status) RankCell(n Node) string {
	switch {
	case n.Rank != nil:
		return strconv.Itoa(*n.Rank)
	}
	rank := "standby"
	if v.Spares > 0 && n.Role == membership.RoleWorker {
		rank = "spare"
	}
	switch {
	case n.Starting:
		rank += " (starting)"
	case n.Cold:
		rank += " (cold)"
	case n.InPlace:
		rank += " (started)"
	}
	return rank
}

// PaddedRow renders a row of the status table (StatusHeader or
// StatusCells) at fixed widths, so that rows printed one at a time, as a
// watch prints them, line up. The first column takes width first (the
// job's name); the last is not padded.
func PaddedRow(cells []string, first int) string {
	var b strings.Builder
	for i, c := range cells {
		w := statusColumns[i].width
		if i == 0 {
			w = first
		}
		if i == len(cells)-1 {
			b.WriteString(c)
			break
		}
		fmt.Fprintf(&b, "%-*s  ", w, c)
	}
	return b.String()
}

// WriteStatusTable writes the job as `status` prints it: its row of the
// status table, the id it is stored under when it has a name, the
// Kubernetes bridge's and the autoscaler's reports, then a table of its
// nodes.
func WriteStatusTable(w io.Writer, v Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(StatusHeader(), "\t"))
	fmt.Fprintln(tw, strings.Join(StatusCells(v), "\t"))
	tw.Flush()
	if v.Name != "" {
		fmt.Fprintf(w, "\nStored under the id %s.\n", v.Job)
	}
	if b := v.Bridge; b != nil {
		fmt.Fprintf(w, "\nKubernetes: %s at %d replicas", OrDash(b.Workload), b.Replicas)
		if b.Problem != "" {
			fmt.Fprintf(w, "; problem: %s", b.Problem)
		}
		fmt.Fprintln(w)
	}
	if a := v.Autoscaler; a != nil {
		fmt.Fprintf(w, "\nAutoscaler: %d workers", a.Target)
		if a.Reason != "" {
			fmt.Fprintf(w, " (%s)", a.Reason)
		}
		if a.HeldBack != "" {
			fmt.Fprintf(w, "; %s", a.HeldBack)
		}
		fmt.Fprintln(w)
	}
	if s := v.Slowest; s != nil {
		fmt.Fprintf(w, "\nSlowest rank: %s\n", s.Line())
	}
	if v.HangRestarts > 0 {
		fmt.Fprintf(w, "\nHang restarts: %d\n", v.HangRestarts)
	}
	if g := v.Goodput; g != nil {
		fmt.Fprintf(w, "\nGoodput: %s\n", g.Line())
	}
	if v.Spares > 0 {
		fmt.Fprintf(w, "\nSpares: %s\n", v.SparesLine())
	}
	if len(v.Nodes) == 0 {
		return
	}
	fmt.Fprintln(w)
	began := slices.ContainsFunc(v.Nodes, func(n Node) bool { return len(n.Began) > 0 })
	header := "NODE\tROLE\tRANK\tHOST\tSTATE\tGENERATION\tEXIT CODE\tPIDS"
	if began {
		header += "\tBEGAN"
	}
	fmt.Fprintln(tw, header)
	for _, n := range v.Nodes {
		rank := v.RankCell(n)
		pids := make([]string, len(n.PIDs))
		for i, pid := range n.PIDs {
			pids[i] = strconv.Itoa(pid)
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s", n.Node, n.Role, rank, n.Host, n.State, n.Generation, n.ExitCode, OrDash(strings.Join(pids, ",")))
		if began {
			// A column per node: what its processes' starts cost it.
			row += "\t" + OrDash(strings.Join(n.Began, "; "))
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
}
