package trainerenv_test

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/trainerenv"
)

var update = flag.Bool("update", false, "rewrite the golden files of the trainer's environment")

// envCase is a plan and the gloo level its sidecars run with.
type envCase struct {
	name string
	job  string
	gloo int
	plan membership.Plan
	// checkpoint is the sidecar's checkpoint store, if it keeps one.
	checkpoint trainerenv.Checkpoint
	// framework, launcher and devices are the sidecar's other options.
	framework trainerenv.Framework
	launcher  trainerenv.Launcher
	devices   []string
	// inherited are variables the processes inherit.
	inherited []string
}

func envCases() []envCase {
	m := func(node string, role membership.Role, rank, global int, host string, ports ...int) membership.Member {
		return membership.Member{Node: node, Role: role, Rank: rank, GlobalRank: global, Host: host, Ports: ports, NProc: len(ports), Lease: 7}
	}
	return []envCase{
		{name: "pytorch", job: "resnet", plan: membership.Plan{Generation: 5, Phase: membership.PhaseRun, WorldSize: 4,
			Master: "10.0.0.1:29500", Restarts: 2, MaxRestarts: 3, Members: []membership.Member{
				m("w0", membership.RoleWorker, 0, 0, "10.0.0.1", 7000, 7001),
				m("w1", membership.RoleWorker, 1, 2, "10.0.0.2", 7000, 7001),
			}}},
		{name: "first-generation-gloo", job: "j", gloo: 1, plan: membership.Plan{Generation: 1, Phase: membership.PhaseRun, WorldSize: 1,
			Master: "127.0.0.1:20000", Members: []membership.Member{
				m("n0", membership.RoleWorker, 0, 0, "127.0.0.1", 20001),
			}}},
		{name: "paddle-ps", job: "ctr", gloo: 2, plan: membership.Plan{Generation: 4, Phase: membership.PhaseRun, WorldSize: 3,
			Master: "w0.ns.svc:29500", Gloo: "p0.ns.svc:29500", Restarts: 1, MaxRestarts: 10, Members: []membership.Member{
				m("w0", membership.RoleWorker, 0, 0, "w0.ns.svc", 36000),
				m("w1", membership.RoleWorker, 1, 1, "w1.ns.svc", 36000, 36001),
				m("p0", membership.RolePS, 0, 0, "p0.ns.svc", 36000),
				// A server of two processes: the ConfigMap's MS_SERVER_NUM
				// counts processes, a process's counts servers.
				m("p1", membership.RolePS, 1, 1, "p1.ns.svc", 36000, 36001),
				m("h0", membership.RoleHeter, 0, 0, "h0.ns.svc", 37000, 37001),
			}}},
		{name: "mindspore", job: "ms", plan: membership.Plan{Generation: 2, Phase: membership.PhaseRun, WorldSize: 2,
			Master: "10.1.0.1:29500", Members: []membership.Member{
				m("s0", membership.RoleScheduler, 0, 0, "10.1.0.9", 2222),
				m("w0", membership.RoleWorker, 0, 0, "10.1.0.1", 8118),
				m("w1", membership.RoleWorker, 1, 1, "10.1.0.2", 8118),
				m("p0", membership.RolePS, 0, 0, "10.1.0.5", 8119),
			}}},
		// A sidecar that keeps checkpoints in memory: its socket, and its
		// module's directory before the user's PYTHONPATH.
		{name: "checkpoint", job: "ckpt", checkpoint: trainerenv.Checkpoint{Socket: "@elastic-checkpoint-41-ab12", Incarnation: "5e0c6f1d2a3b4c7d", PythonPath: "/tmp/elastic-41/python:/home/u/lib"},
			plan: membership.Plan{Generation: 2, Phase: membership.PhaseRun, WorldSize: 2,
				Master: "10.0.0.1:29500", Members: []membership.Member{
					m("w0", membership.RoleWorker, 0, 0, "10.0.0.1", 7000),
					m("w1", membership.RoleWorker, 1, 1, "10.0.0.2", 7000),
				}}},
		// Each framework's contract alone, on nodes with GPUs.
		{name: "framework-pytorch", job: "tj", framework: trainerenv.PyTorch, devices: []string{"0", "1"},
			inherited: []string{"OMP_NUM_THREADS"}, plan: membership.Plan{Generation: 2, Phase: membership.PhaseRun, WorldSize: 4,
				Master: "10.0.0.1:29500", Members: []membership.Member{
					m("w0", membership.RoleWorker, 0, 0, "10.0.0.1", 7000, 7001),
					m("w1", membership.RoleWorker, 1, 2, "10.0.0.2", 7000, 7001),
				}}},
		{name: "framework-paddle-gpu", job: "pj", framework: trainerenv.Paddle, gloo: -1, devices: []string{"0", "1", "2", "3"},
			plan: membership.Plan{Generation: 3, Phase: membership.PhaseRun, WorldSize: 3,
				Master: "10.0.0.1:29500", Members: []membership.Member{
					// One process takes every device; two take one each.
					m("w0", membership.RoleWorker, 0, 0, "10.0.0.1", 7000),
					m("w1", membership.RoleWorker, 1, 1, "10.0.0.2", 7000, 7001),
				}}},
		{name: "framework-paddle-ps", job: "wd", framework: trainerenv.Paddle, gloo: -1, plan: membership.Plan{Generation: 1, Phase: membership.PhaseRun,
			WorldSize: 2, Master: "10.0.0.1:29500", Gloo: "10.0.2.1:29500", Members: []membership.Member{
				m("w0", membership.RoleWorker, 0, 0, "10.0.0.1", 7000),
				m("w1", membership.RoleWorker, 1, 1, "10.0.0.2", 7000),
				m("p0", membership.RolePS, 0, 0, "10.0.2.1", 7000),
			}}},
		{name: "framework-mindspore", job: "ms", framework: trainerenv.MindSpore, devices: []string{"0", "1"},
			inherited: []string{"MS_TOPO_TIMEOUT"}, plan: membership.Plan{Generation: 2, Phase: membership.PhaseRun, WorldSize: 4,
				Master: "10.1.0.1:29500", Members: []membership.Member{
					m("s0", membership.RoleScheduler, 0, 0, "10.1.0.9", 8118),
					m("w0", membership.RoleWorker, 0, 0, "10.1.0.1", 7000, 7001),
					m("w1", membership.RoleWorker, 1, 2, "10.1.0.2", 7000, 7001),
				}}},
		// paddle.distributed.launch as the command: one launcher a node.
		{name: "paddle-launch", job: "resnet", framework: trainerenv.Paddle, launcher: trainerenv.PaddleLaunch, devices: []string{"0", "1"},
			plan: membership.Plan{Generation: 2, Phase: membership.PhaseRun, WorldSize: 4,
				Master: "10.0.0.1:29500", Members: []membership.Member{
					m("w0", membership.RoleWorker, 0, 0, "10.0.0.1", 36000, 36001),
					m("w1", membership.RoleWorker, 1, 2, "10.0.0.2", 36000, 36001),
				}}},
		// IPv6: the ConfigMap's PADDLE_MASTER has no brackets, a process's has.
		{name: "ipv6", job: "v6", plan: membership.Plan{Generation: 3, Phase: membership.PhaseRun, WorldSize: 2,
			Master: "[fd00::1]:29500", Members: []membership.Member{
				m("w0", membership.RoleWorker, 0, 0, "fd00::1", 7000),
				m("w1", membership.RoleWorker, 1, 1, "fd00::2", 7000),
			}}},
	}
}

// options are the sidecar's options of tc.
func (tc envCase) options() trainerenv.Options {
	return trainerenv.Options{Gloo: tc.gloo, Checkpoint: tc.checkpoint, Framework: tc.framework, Launcher: tc.launcher,
		Devices: tc.devices, Inherited: func(name string) bool { return slices.Contains(tc.inherited, name) }}
}

// TestGolden pins the environment of every process of representative
// plans, and the endpoint ConfigMap of each, to testdata/NAME.env. The
// files were written by the code before this package existed
// (launcher.Topology.Env, fed by sidecar.TopologyOf, and the bridge's own
// ConfigMap table).
func TestGolden(t *testing.T) {
	for _, tc := range envCases() {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.plan.Validate())
			g := trainerenv.Of(tc.job, tc.plan)
			var b strings.Builder
			fmt.Fprintf(&b, "# job %s, generation %d, gloo %d\n", tc.job, tc.plan.Generation, tc.gloo)
			if tc.framework != "" || tc.launcher != "" || tc.devices != nil || tc.inherited != nil {
				fmt.Fprintf(&b, "# framework %s, launcher %q, devices %q, inherited %q\n", tc.framework, tc.launcher, tc.devices, tc.inherited)
			}
			for _, member := range tc.plan.Members {
				node := g.NodeWith(member, tc.options())
				for local := range node.Processes() {
					fmt.Fprintf(&b, "\n== process: node %s, %s rank %d, local rank %d\n", member.Node, member.Role, member.Rank, local)
					for _, kv := range node.Env(local) {
						fmt.Fprintln(&b, kv)
					}
				}
			}
			fmt.Fprintf(&b, "\n== configmap %s-elastic\n", tc.job)
			data := g.Shared()
			for _, k := range slices.Sorted(maps.Keys(data)) {
				fmt.Fprintf(&b, "%s=%s\n", k, data[k])
			}
			path := filepath.Join("testdata", tc.name+".env")
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(want), b.String())
		})
	}
}
