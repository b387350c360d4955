//go:build !sidecaronly

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/membership"
)

// nodeView is one node as `status` shows it.
type nodeView struct {
	Node       string               `json:"node"`
	Role       membership.Role      `json:"role"`
	Rank       *int                 `json:"rank"` // nil on standby
	Host       string               `json:"host"`
	State      membership.NodeState `json:"state"`
	Generation int64                `json:"generation"`
	ExitCode   int                  `json:"exitCode,omitempty"`
}

type statusView struct {
	Job        string                       `json:"job"`
	Status     membership.Status            `json:"status"`
	Bridge     *membership.BridgeStatus     `json:"bridge,omitempty"`
	Autoscaler *membership.AutoscalerStatus `json:"autoscaler,omitempty"`
	Nodes      []nodeView                   `json:"nodes"`
}

func newStatusCommand(env lookupEnv) *cobra.Command {
	var (
		etcd   etcdFlags
		job    string
		watch  bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "status --etcd-endpoints URLS --job ID [--watch] [-o table|json]",
		Short: "Show a job's phase, generation and nodes",
		Long: `status shows the job as the coordinator last reported it: its phase (Waiting,
Restarting, Running, Succeeded, Failed), generation, target np, size, restarts
and the durations of the last restart; then every node with its rank.

With --watch it prints a line every time the status changes, until the job ends.`,
		Example: `  coordinator status --etcd-endpoints http://127.0.0.1:2379 --job default
  coordinator status --job resnet --watch -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := jobFlag(job); err != nil {
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
			client := coordinator.NewClient(cli, keys)
			out := cmd.OutOrStdout()
			view, err := loadView(cmd, client, job)
			if err != nil {
				return err
			}
			if watch {
				return watchJob(cmd, client, job, output)
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
	fs.StringVar(&job, "job", fromEnv(env, "", "ELASTIC_JOB_ID", "PADDLE_ELASTIC_JOB_ID"), "job id"+envNote("ELASTIC_JOB_ID", "PADDLE_ELASTIC_JOB_ID"))
	fs.BoolVarP(&watch, "watch", "w", false, "print every change of the status until the job ends")
	fs.StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

func loadView(cmd *cobra.Command, client *coordinator.Client, job string) (statusView, error) {
	ctx := cmd.Context()
	st, err := client.Status(ctx, job)
	if err != nil {
		return statusView{}, err
	}
	nodes, err := client.Nodes(ctx, job)
	if err != nil {
		return statusView{}, err
	}
	ranks := map[string]int{}
	if p, err := client.Plan(ctx, job); err == nil && p.Phase == membership.PhaseRun {
		for _, m := range p.Members {
			ranks[m.Node] = m.Rank
		}
	}
	view := statusView{Job: job, Status: st, Nodes: []nodeView{}}
	if b, ok, err := client.Bridge(ctx, job); err == nil && ok {
		view.Bridge = &b
	}
	if a, ok, err := client.Autoscaler(ctx, job); err == nil && ok {
		view.Autoscaler = &a
	}
	for _, n := range nodes {
		v := nodeView{Node: n.ID, Role: n.Role, Host: n.Host, State: n.State, Generation: n.Generation, ExitCode: n.ExitCode}
		if r, ok := ranks[n.ID]; ok {
			v.Rank = &r
		}
		view.Nodes = append(view.Nodes, v)
	}
	return view, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}

const statusHeader = "JOB\tPHASE\tGENERATION\tNP\tNODES\tREADY\tWORLD SIZE\tRESTARTS\tLAST RESTART\tMESSAGE"

func statusRow(job string, s membership.Status) string {
	took := "-"
	if s.Steps != nil {
		took = fmt.Sprint(s.Steps.Total)
	}
	return fmt.Sprintf("%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s", job, s.Phase, s.Generation, s.NP, s.Members, s.Ready, s.WorldSize, s.Restarts, took, s.Message)
}

func writeTable(w io.Writer, v statusView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, statusHeader)
	fmt.Fprintln(tw, statusRow(v.Job, v.Status))
	tw.Flush()
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

// watchJob prints the status at every change until the job ends.
func watchJob(cmd *cobra.Command, client *coordinator.Client, job, output string) error {
	out := cmd.OutOrStdout()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if output == "table" {
		fmt.Fprintln(tw, statusHeader)
	}
	return client.WatchStatus(cmd.Context(), job, func(s membership.Status) (bool, error) {
		if output == "json" {
			return s.Phase.Done(), writeJSON(out, statusView{Job: job, Status: s, Nodes: []nodeView{}})
		}
		fmt.Fprintln(tw, statusRow(job, s))
		return s.Phase.Done(), tw.Flush()
	})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
