//go:build !sidecaronly

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

func newStatusCommand(env lookupEnv) *cobra.Command {
	var (
		etcd   etcdFlags
		job    jobOption
		watch  bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "status --etcd-endpoints URLS --job ID [--watch] [-o table|json]",
		Short: "Show a job's phase, generation and nodes",
		Long: `status shows the job as the coordinator last reported it: its phase (Waiting,
Restarting, Running, Succeeded, Failed), generation, target np, size, restarts
and the durations of the last restart; then every node with its rank.

With --watch it prints a line every time the status changes, until the job
ends, and exits with the job's result: 0 when it succeeded, its exit code (at
least 1) when it failed. With -o json every line is one JSON object, with
durations in seconds, np as {"min":N,"max":M} and the nodes.`,
		Example: `  coordinator status --etcd-endpoints http://127.0.0.1:2379 --job default
  coordinator status --job resnet --watch -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := job.id()
			if err != nil {
				return err
			}
			if output != "table" && output != "json" {
				return usagef("-o %q: want table or json", output)
			}
			ctx := cmd.Context()
			cli, keys, err := etcd.client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			client := jobclient.New(cli, keys)
			out := cmd.OutOrStdout()
			view, err := loadView(ctx, client, id)
			if err != nil {
				return err
			}
			if watch {
				return watchJob(ctx, out, client, id, output)
			}
			if output == "json" {
				return writeJSON(out, view)
			}
			writeTable(out, view)
			return nil
		},
	}
	fs := cmd.Flags()
	etcd.register(fs, env)
	job.register(fs, env, "", jobVariables...)
	fs.BoolVarP(&watch, "watch", "w", false, "print every change of the status until the job ends; exit with the job's result")
	fs.StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

// nodeView is one node as `status` shows it.
type nodeView struct {
	Node       string               `json:"node"`
	Role       membership.Role      `json:"role"`
	Rank       *int                 `json:"rank"` // nil on standby
	Host       string               `json:"host"`
	State      membership.NodeState `json:"state"`
	Generation int64                `json:"generation"`
	ExitCode   int                  `json:"exitCode"`
}

// npView is np for scripts: numbers, not "2:4".
type npView struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// stepsView are a restart's durations in seconds.
type stepsView struct {
	Detect float64 `json:"detect"`
	Stop   float64 `json:"stop"`
	Wait   float64 `json:"wait"`
	Start  float64 `json:"start"`
	Total  float64 `json:"total"`
}

// statusView is a job as `status` shows it, and as its JSON is read by
// scripts.
type statusView struct {
	Job         string                       `json:"job"`
	Name        string                       `json:"name,omitempty"`
	Phase       membership.JobPhase          `json:"phase"`
	Generation  int64                        `json:"generation"`
	NP          *npView                      `json:"np"`
	Members     int                          `json:"members"`
	Ready       int                          `json:"ready"`
	WorldSize   int                          `json:"worldSize"`
	Restarts    int                          `json:"restarts"`
	ExitCode    int                          `json:"exitCode"`
	Message     string                       `json:"message"`
	LastRestart *stepsView                   `json:"lastRestart"`
	UpdatedAt   time.Time                    `json:"updatedAt"`
	Bridge      *membership.BridgeStatus     `json:"bridge,omitempty"`
	Autoscaler  *membership.AutoscalerStatus `json:"autoscaler,omitempty"`
	Nodes       []nodeView                   `json:"nodes"`
}

func seconds(d membership.Duration) float64 { return time.Duration(d).Seconds() }

// newStatusView is the job's status without its nodes.
func newStatusView(job string, s membership.Status) statusView {
	v := statusView{Job: job, Phase: s.Phase, Generation: s.Generation, Members: s.Members, Ready: s.Ready, WorldSize: s.WorldSize,
		Restarts: s.Restarts, ExitCode: s.ExitCode, Message: s.Message, UpdatedAt: s.UpdatedAt, Nodes: []nodeView{}}
	if np := s.NP; !np.IsZero() {
		v.NP = &npView{Min: np.Min, Max: np.Max}
	}
	if st := s.Steps; st != nil {
		v.LastRestart = &stepsView{Detect: seconds(st.Detect), Stop: seconds(st.Stop), Wait: seconds(st.Wait), Start: seconds(st.Start), Total: seconds(st.Total)}
	}
	return v
}

// loadView reads everything `status` shows of a job.
func loadView(ctx context.Context, client *jobclient.Client, job string) (statusView, error) {
	st, err := client.Status(ctx, job)
	if err != nil {
		return statusView{}, err
	}
	view := newStatusView(job, st)
	if spec, err := client.Spec(ctx, job); err == nil {
		view.Name = spec.Name
	}
	if view.Nodes, err = loadNodes(ctx, client, job); err != nil {
		return statusView{}, err
	}
	if b, ok, err := client.Bridge(ctx, job); err == nil && ok {
		view.Bridge = &b
	}
	if a, ok, err := client.Autoscaler(ctx, job); err == nil && ok {
		view.Autoscaler = &a
	}
	return view, nil
}

// loadNodes reads the job's nodes with their ranks in the running plan.
func loadNodes(ctx context.Context, client *jobclient.Client, job string) ([]nodeView, error) {
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
	out := make([]nodeView, 0, len(nodes))
	for _, n := range nodes {
		v := nodeView{Node: n.ID, Role: n.Role, Host: n.Host, State: n.State, Generation: n.Generation, ExitCode: n.ExitCode}
		if r, ok := ranks[n.ID]; ok {
			v.Rank = &r
		}
		out = append(out, v)
	}
	return out, nil
}

func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// statusColumns are the status table's columns with the width a watch
// pads them to, so that rows printed one at a time line up.
var statusColumns = []struct {
	title string
	width int
}{{"JOB", 0}, {"PHASE", 10}, {"GENERATION", 10}, {"NP", 9}, {"NODES", 6}, {"READY", 6}, {"WORLD SIZE", 10}, {"RESTARTS", 8}, {"LAST RESTART", 12}, {"MESSAGE", 0}}

func statusCells(v statusView) []string {
	took := "-"
	if v.LastRestart != nil {
		took = membership.Duration(time.Duration(v.LastRestart.Total * float64(time.Second))).String()
	}
	np := "-"
	if v.NP != nil {
		np = membership.NP{Min: v.NP.Min, Max: v.NP.Max}.String()
	}
	job := v.Job
	if v.Name != "" {
		job = v.Name
	}
	return []string{job, string(v.Phase), strconv.FormatInt(v.Generation, 10), np, strconv.Itoa(v.Members), strconv.Itoa(v.Ready),
		strconv.Itoa(v.WorldSize), strconv.Itoa(v.Restarts), took, orDash(v.Message)}
}

// paddedRow renders cells at fixed widths; the first column takes width
// first (the job's name), the last is not padded.
func paddedRow(cells []string, first int) string {
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

func statusHeader() []string {
	out := make([]string, len(statusColumns))
	for i, c := range statusColumns {
		out[i] = c.title
	}
	return out
}

func writeTable(w io.Writer, v statusView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(statusHeader(), "\t"))
	fmt.Fprintln(tw, strings.Join(statusCells(v), "\t"))
	tw.Flush()
	if v.Name != "" {
		fmt.Fprintf(w, "\nStored under the id %s.\n", v.Job)
	}
	if b := v.Bridge; b != nil {
		fmt.Fprintf(w, "\nKubernetes: %s at %d replicas", orDash(b.Workload), b.Replicas)
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
	if len(v.Nodes) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "NODE\tROLE\tRANK\tHOST\tSTATE\tGENERATION\tEXIT CODE")
	for _, n := range v.Nodes {
		rank := "standby"
		if n.Rank != nil {
			rank = strconv.Itoa(*n.Rank)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", n.Node, n.Role, rank, n.Host, n.State, n.Generation, n.ExitCode)
	}
	tw.Flush()
}

// watchJob prints the status at every change until the job ends, and
// returns the job's result: nil when it succeeded, an exitError with its
// exit code when it failed.
func watchJob(ctx context.Context, out io.Writer, client *jobclient.Client, job, output string) error {
	name := job
	if spec, err := client.Spec(ctx, job); err == nil && spec.Name != "" {
		name = spec.Name
	}
	first := max(len("JOB"), len(name))
	if output == "table" {
		fmt.Fprintln(out, paddedRow(statusHeader(), first))
	}
	var final membership.Status
	err := client.WatchStatus(ctx, job, func(s membership.Status) (bool, error) {
		v := newStatusView(job, s)
		if name != job {
			v.Name = name
		}
		done := s.Phase.Done()
		if done {
			final = s
		}
		if output == "json" {
			nodes, err := loadNodes(ctx, client, job)
			if err != nil {
				return false, err
			}
			v.Nodes = nodes
			return done, writeJSON(out, v)
		}
		_, err := fmt.Fprintln(out, paddedRow(statusCells(v), first))
		return done, err
	})
	switch {
	case err != nil:
		return err
	case final.Phase == membership.JobFailed:
		return exitError{code: max(final.ExitCode, 1)}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
