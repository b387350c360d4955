package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/etcdcluster"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// inject carries out one fault, records it, and undoes it when it ends.
// Each kind is carried out by the method of its name; one that lasts
// returns how to undo it, called For after the fault was recorded.
func (r *run) inject(ctx context.Context, f fault) {
	rec := injection{fault: f, At: time.Now()}
	var undo func()
	switch f.Kind {
	case killTrainer:
		rec.Note = r.killTrainer(r.nodes[f.Node])
	case killSidecar:
		rec.Note = fmt.Sprintf("sidecar pid %d", r.nodes[f.Node].sidecar.kill(f.For))
	case freezeNode:
		undo = r.freezeNode(&rec)
	case freezeSidecar:
		undo = r.freezeSidecar(&rec)
	case freezeSupers:
		undo = r.freezeSupers(&rec)
	case partition:
		undo = r.partition(&rec)
	case killCoordinator:
		rec.Note = r.killCoordinator(ctx, f)
	case killEtcd, quorumLoss:
		undo = r.killEtcd(&rec)
	case moveEtcdLeader:
		rec.Note = r.moveEtcdLeader(ctx, f)
	case scale, scaleBurst:
		r.record(rec)
		r.scales(f)
		return
	case stopTrainer:
		undo = r.stopTrainer(&rec)
	case deadlockTrainer:
		undo = r.deadlockTrainer(&rec)
	case slowRank:
		undo = r.slowRank(&rec)
	case slowStop:
		undo = r.slowStop(&rec)
	}
	r.record(rec)
	if undo != nil {
		time.Sleep(f.For)
		undo()
	}
}

// freezeNode stops a node's sidecar and every process below it; undone,
// they are continued.
func (r *run) freezeNode(rec *injection) (undo func()) {
	frozen := proctest.FreezeTree(r.nodes[rec.Node].sidecar.pid())
	rec.Note = fmt.Sprintf("froze pids %v", frozen)
	return func() { proctest.Thaw(frozen) }
}

// freezeSidecar stops a node's sidecar alone; undone, it is continued.
func (r *run) freezeSidecar(rec *injection) (undo func()) {
	pid := r.nodes[rec.Node].sidecar.pid()
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	rec.Note = fmt.Sprintf("froze sidecar pid %d", pid)
	return func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
}

// freezeSupers stops the sidecar and its guard, not the trainers: only
// the trainers' fence watchdogs can kill them now. Undone, they are
// continued.
func (r *run) freezeSupers(rec *injection) (undo func()) {
	pid := r.nodes[rec.Node].sidecar.pid()
	if pid <= 0 {
		rec.Note = "no sidecar running"
		return nil
	}
	frozen := []int{pid}
	for _, p := range guard.Descendants(pid) {
		if guard.IsGuardProcess(p) {
			frozen = append(frozen, p)
		}
	}
	for _, p := range frozen {
		_ = syscall.Kill(p, syscall.SIGSTOP)
	}
	rec.Note = fmt.Sprintf("froze sidecar and guard pids %v", frozen)
	return func() { proctest.Thaw(frozen) }
}

// partition cuts a node's links to the etcd members; undone, they are
// healed.
func (r *run) partition(rec *injection) (undo func()) {
	links := r.nodes[rec.Node].links
	for _, p := range links {
		p.Cut()
	}
	return func() {
		for _, p := range links {
			p.Heal()
		}
	}
}

// killCoordinator kills the replica that leads, restarted after For, and
// says which.
func (r *run) killCoordinator(ctx context.Context, f fault) string {
	for _, c := range r.replicas {
		if c.leads(ctx) {
			return fmt.Sprintf("%s pid %d", c.name, c.kill(f.For))
		}
	}
	return "no replica led"
}

// killEtcd kills an etcd member, or two for a quorum loss; undone, they
// are restarted.
func (r *run) killEtcd(rec *injection) (undo func()) {
	lost := []*etcdcluster.Member{r.etcd.Members[rec.Node]}
	if rec.Kind == quorumLoss {
		lost = append(lost, r.etcd.Members[rec.Peer])
	}
	for _, m := range lost {
		r.etcd.Kill(m)
	}
	return func() {
		for _, m := range lost {
			if err := r.etcd.Restart(m); err != nil {
				fmt.Fprintf(os.Stderr, "chaos: restart %s: %v\n", m.Name, err)
			}
		}
	}
}

// moveEtcdLeader hands etcd's lead to the member the fault names, or the
// next running one that does not lead, and says from whom to whom.
func (r *run) moveEtcdLeader(ctx context.Context, f fault) string {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	leader, err := r.etcd.Leader(c)
	if err != nil {
		return err.Error()
	}
	for i := range 3 {
		to := r.etcd.Members[(f.Node+i)%3]
		if to != leader && to.Running() {
			if err := r.etcd.MoveLeader(c, to); err != nil {
				return fmt.Sprintf("from %s to %s: %v", leader.Name, to.Name, err)
			}
			return fmt.Sprintf("from %s to %s", leader.Name, to.Name)
		}
	}
	return ""
}

// scales sets the targets of a scale or a burst one after another, Gap
// apart; one burst at a time, so that their targets do not interleave.
func (r *run) scales(f fault) {
	r.scaleMu.Lock()
	defer r.scaleMu.Unlock()
	for i, np := range f.NP {
		if i > 0 {
			time.Sleep(f.Gap)
		}
		r.scale(np)
	}
}

// stopTrainer stops the trainer alone: its sidecar, guard and fence
// watchdog run on, and the hang watch must end it. Undone, it is
// continued if it is still there (it should not be).
func (r *run) stopTrainer(rec *injection) (undo func()) {
	pid := r.trainerPid(r.nodes[rec.Node])
	if pid == 0 {
		rec.Note = "no trainer running"
		return nil
	}
	st, _ := guard.ReadProc(pid)
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	rec.Pid = pid
	rec.Note = fmt.Sprintf("stopped trainer pid %d", pid)
	return func() {
		if now, ok := guard.ReadProc(pid); ok && now.Start == st.Start {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// deadlockTrainer orders the trainer running now to sleep forever at its
// next step. The order names it, so that a trainer of a later generation
// never obeys it: a trainer that sleeps before its first step is watched
// only by the startup budget (minutes). Undone, the order is withdrawn.
func (r *run) deadlockTrainer(rec *injection) (undo func()) {
	n := r.nodes[rec.Node]
	pid := r.trainerPid(n)
	if pid == 0 {
		rec.Note = "no trainer running"
		return nil
	}
	file := filepath.Join(r.deadlock, n.id)
	_ = os.WriteFile(file, []byte(strconv.Itoa(pid)+"\n"), 0o600)
	rec.Pid = pid
	rec.Note = fmt.Sprintf("trainer pid %d to sleep forever at its next step", pid)
	return func() { _ = os.Remove(file) }
}

// slowRank makes a node's trainers step Factor times slower: a
// straggler, not a hang. Undone, they step at the beat again.
func (r *run) slowRank(rec *injection) (undo func()) {
	file := filepath.Join(r.straggle, r.nodes[rec.Node].id)
	step := r.cfg.Beat * time.Duration(rec.Factor)
	_ = os.WriteFile(file, []byte(strconv.FormatFloat(step.Seconds(), 'f', 3, 64)+"\n"), 0o600)
	rec.Note = fmt.Sprintf("n%d's trainers step every %s", rec.Node, step)
	return func() { _ = os.Remove(file) }
}

// slowStop makes a node answer SIGTERM after longer than the stop
// timeout, and kills the trainer of another, whose failure stops the job.
// Undone, the node stops at once again.
func (r *run) slowStop(rec *injection) (undo func()) {
	file := filepath.Join(r.slow, r.nodes[rec.Node].id)
	delay := r.cfg.StopTimeout + 2*time.Second
	_ = os.WriteFile(file, []byte(strconv.FormatFloat(delay.Seconds(), 'f', 3, 64)), 0o600)
	time.Sleep(200 * time.Millisecond)
	rec.Note = fmt.Sprintf("stop of n%d takes %s; %s", rec.Node, delay, r.killTrainer(r.nodes[rec.Peer]))
	return func() { _ = os.Remove(file) }
}

// record keeps a fault as it was carried out, for the analysis.
func (r *run) record(rec injection) {
	r.mu.Lock()
	r.injections = append(r.injections, rec)
	r.mu.Unlock()
}

// scale sets the target, retrying as a user would until it is accepted.
func (r *run) scale(np int) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		cmd := exec.Command(r.cfg.Binary, "scale", "--etcd-endpoints", strings.Join(r.etcd.Endpoints(), ","), "--job", job,
			"--np", strconv.Itoa(np), "--create", "--dial-timeout", "2s")
		if cmd.Run() == nil {
			r.mu.Lock()
			r.target = np
			r.mu.Unlock()
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "chaos: scale to %d never went through\n", np)
}

// killTrainer sends SIGKILL to the training process below a node's sidecar.
func (r *run) killTrainer(n *node) string {
	if n.sidecar.pid() == 0 {
		return "no sidecar running"
	}
	if pid := r.trainerPid(n); pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return fmt.Sprintf("killed trainer pid %d", pid)
	}
	return "no trainer running"
}

// trainerPid is the training process below a node's sidecar, 0 if none.
func (r *run) trainerPid(n *node) int {
	root := n.sidecar.pid()
	if root == 0 {
		return 0
	}
	if r.cfg.InPlace {
		// A node runs its rank's process and, while it holds none, a
		// started spare with the same command line: the rank's is the one
		// that logged its start last.
		if pid := r.loggedTrainer(n.id); pid != 0 && guard.IsDescendant(pid, root) {
			return pid
		}
	}
	for _, pid := range guard.Descendants(root) {
		if parent, _ := guard.ParentOf(pid); isWorker(pid) && !isWorker(parent) {
			return pid
		}
	}
	// A trainer in a warm interpreter has the interpreter's command line:
	// the pid it logged when it started is the one.
	if pid := r.loggedTrainer(n.id); pid != 0 && guard.IsDescendant(pid, root) {
		return pid
	}
	return 0
}

// loggedTrainer is the pid of the last trainer the node's log line says
// started, 0 if none.
func (r *run) loggedTrainer(nodeID string) int {
	data, err := os.ReadFile(r.log)
	if err != nil {
		return 0
	}
	pid := 0
	for _, l := range bytes.Split(data, []byte("\n")) {
		f := strings.Fields(string(l))
		if len(f) == 9 && f[0] == "start" && f[8] == nodeID {
			pid, _ = strconv.Atoi(f[4])
		}
	}
	return pid
}

// isWorker reports whether pid runs worker.sh (the trainer, or a subshell
// of it).
func isWorker(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(cmdline, []byte("worker.sh"))
}
