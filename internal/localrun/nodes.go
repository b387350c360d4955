package localrun

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/launcher"
	"github.com/elastictraining/coordinator/membership"
)

// node is one local node: a sidecar process with its own ports.
type node struct {
	index      int
	role       membership.Role
	id         string
	masterPort int
	port       int // first endpoint port
	// metricsPort is where its sidecar serves its metrics, when run
	// serves the job's; 0 for none.
	metricsPort int
	cmd         *exec.Cmd
	stopping    bool // asked to leave: it is not started again
	crashes     int
	waitErr     error
}

func (n *node) stop() {
	n.stopping = true
	if n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
	}
}

func (n *node) kill() {
	if n.cmd.Process != nil {
		_ = n.cmd.Process.Kill()
	}
}

// scaleTo starts or stops nodes until want of them run. Nodes on standby go
// first, then the highest ordinals (node <job>-<i> has ordinal i), which are
// the ones the coordinator leaves out of a smaller table: a scale-down
// restarts the job once.
func (r *runner) scaleTo(ctx context.Context, want int) {
	var live []*node
	for _, n := range r.nodes {
		if !n.stopping && n.role == membership.RoleWorker {
			live = append(live, n)
		}
	}
	// A crashed node waiting to start again counts; it is the first to go.
	for index, n := range r.pending {
		if n.role != membership.RoleWorker {
			continue
		}
		if len(live)+1 > want {
			delete(r.pending, index)
			continue
		}
		live = append(live, n)
	}
	switch {
	case len(live) < want:
		for index := 0; len(live) < want; index++ {
			if _, taken := r.nodes[index]; taken {
				continue
			}
			if _, taken := r.pending[index]; taken {
				continue
			}
			n, err := r.start(index, nil)
			if err != nil {
				fmt.Fprintf(r.cfg.Err, "coordinator run: start node %d: %v\n", index, err)
				return
			}
			live = append(live, n)
		}
	case len(live) > want:
		members := map[string]bool{}
		if p, err := r.client.Plan(ctx, r.cfg.Job); err == nil && p.Phase == membership.PhaseRun {
			for _, m := range p.Members {
				members[m.Node] = true
			}
		}
		sort.Slice(live, func(i, j int) bool {
			iMember, jMember := members[live[i].id], members[live[j].id]
			if iMember != jMember {
				return !iMember // standby first
			}
			return live[i].index > live[j].index
		})
		live = running(live, r.pending)
		for _, n := range live[:max(len(live)-want, 0)] {
			fmt.Fprintf(r.cfg.Out, "coordinator run: stopping node %s\n", n.id)
			n.stop()
		}
	}
}

// Node indexes of the roles other than workers', which scale alone: the
// parameter servers' from psIndex, the scheduler's schedulerIndex.
const (
	psIndex        = 1 << 20
	schedulerIndex = 1 << 21
)

// roleOf is the role of node index and its number within the role.
func roleOf(index int) (membership.Role, int) {
	switch {
	case index >= schedulerIndex:
		return membership.RoleScheduler, index - schedulerIndex
	case index >= psIndex:
		return membership.RolePS, index - psIndex
	}
	return membership.RoleWorker, index
}

// startOtherRoles starts the job's parameter servers and scheduler, whose
// numbers the spec fixes.
func (r *runner) startOtherRoles() error {
	for i := range r.cfg.Spec.PS {
		if _, err := r.start(psIndex+i, nil); err != nil {
			return err
		}
	}
	for i := range r.cfg.Spec.Schedulers {
		if _, err := r.start(schedulerIndex+i, nil); err != nil {
			return err
		}
	}
	return nil
}

// start runs the sidecar of node index; a restarted node keeps its ports.
func (r *runner) start(index int, old *node) (*node, error) {
	role, i := roleOf(index)
	n := &node{index: index, role: role, id: fmt.Sprintf("%s-%d", r.cfg.Job, i)}
	if role != membership.RoleWorker {
		n.id = fmt.Sprintf("%s-%s-%d", r.cfg.Job, role, i)
	}
	// A parameter server or a scheduler is one process.
	nproc := 1
	if role == membership.RoleWorker {
		nproc = r.cfg.NProc
	}
	if old != nil {
		n.masterPort, n.port, n.metricsPort, n.crashes = old.masterPort, old.port, old.metricsPort, old.crashes
	} else {
		count := nproc + 1
		if r.metrics != nil {
			count++ // the sidecar's metrics, after its endpoints
		}
		base, err := freePorts(count, r.ports)
		if err != nil {
			return nil, err
		}
		for p := base; p < base+count; p++ {
			r.ports[p] = true
		}
		n.masterPort, n.port = base, base+1
		if r.metrics != nil {
			n.metricsPort = base + nproc + 1
		}
	}
	args := []string{"sidecar",
		"--etcd-endpoints", r.endpoint, "--job", r.cfg.Job, "--node-id", n.id, "--host", "127.0.0.1",
		"--port", strconv.Itoa(n.port), "--master-port", strconv.Itoa(n.masterPort),
		"--nproc-per-node", strconv.Itoa(nproc), "--ttl", r.cfg.TTL.String(), "--grace-period", r.cfg.Grace.String(),
		"--log-level", r.cfg.SidecarLogLevel, "--state-dir", r.stateDir, "--role", string(role),
		"--quiet-result", // run says how the job ended, once
	}
	if n.metricsPort != 0 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(n.metricsPort))
		args = append(args, "--listen-metrics", addr)
		r.metrics.set(n.id, addr)
	}
	env := r.cfg.Env
	if devices := r.devicesOf(n, nproc); len(devices) > 0 {
		args = append(args, "--devices", "auto")
		env = append(slices.Clip(env), "CUDA_VISIBLE_DEVICES="+strings.Join(devices, ","))
	} else {
		args = append(args, "--devices", "none")
	}
	args = append(append(append(args, r.cfg.SidecarArgs...), "--"), r.cfg.Command...)
	n.cmd = exec.Command(r.cfg.Executable, args...)
	n.cmd.Env = env
	n.cmd.Stdout, n.cmd.Stderr = r.cfg.Out, r.cfg.Err
	// A sidecar leaves (and stops its trainers) when `run` dies.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	waited, err := launcher.Spawn(n.cmd)
	if err != nil {
		return nil, err
	}
	r.nodes[index] = n
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		n.waitErr = <-waited
		r.exited <- n
	}()
	return n, nil
}

// devicesOf is node n's share of the machine's devices: worker node i's
// processes i*nproc onwards, modulo their number, each device once; none
// for the other roles.
func (r *runner) devicesOf(n *node, nproc int) []string {
	d := r.cfg.Devices
	if len(d) == 0 || n.role != membership.RoleWorker {
		return nil
	}
	var out []string
	for l := range nproc {
		dev := d[(n.index*nproc+l)%len(d)]
		if !slices.Contains(out, dev) {
			out = append(out, dev)
		}
	}
	return out
}

// nodeExited handles a sidecar that ended: gone for good if it was asked to
// leave, started again otherwise, as a pod with restartPolicy Always.
func (r *runner) nodeExited(n *node) {
	if r.nodes[n.index] != n {
		return
	}
	delete(r.nodes, n.index)
	if n.stopping {
		if r.metrics != nil {
			r.metrics.set(n.id, "")
		}
		return
	}
	if st, err := r.client.Status(context.Background(), r.cfg.Job); err == nil && st.Phase.Done() {
		return // it ended with the job; the status watch reports it
	}
	n.crashes++
	fmt.Fprintf(r.cfg.Out, "coordinator run: node %s exited (%v); starting it again\n", n.id, n.waitErr)
	if n.crashes == 1 {
		r.restart(n)
		return
	}
	// A sidecar that keeps crashing must not spin: back off up to 5 s.
	delay := min(time.Duration(1<<min(n.crashes-2, 6))*100*time.Millisecond, 5*time.Second)
	r.pending[n.index] = n // holds its index and ports meanwhile
	time.AfterFunc(delay, func() {
		select {
		case r.restarts <- n:
		case <-r.done:
		}
	})
}

func (r *runner) restart(n *node) {
	delete(r.pending, n.index)
	if _, err := r.start(n.index, n); err != nil {
		fmt.Fprintf(r.cfg.Err, "coordinator run: restart node %s: %v\n", n.id, err)
	}
}

// freePorts finds count consecutive ports that are free on 127.0.0.1 and
// not in taken, below the kernel's range of ephemeral ports so that no
// outgoing connection takes one between two generations.
func freePorts(count int, taken map[int]bool) (int, error) {
	for range 200 {
		base := 20000 + rand.IntN(12000)
		ok := true
		for p := base; p < base+count && ok; p++ {
			if taken[p] {
				ok = false
				break
			}
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports between 20000 and 32000", count)
}

// running drops the nodes waiting to start again.
func running(nodes []*node, pending map[int]*node) []*node {
	out := nodes[:0]
	for _, n := range nodes {
		if pending[n.index] != n {
			out = append(out, n)
		}
	}
	return out
}
