// Package launcher supervises a node's training processes: it starts one
// process per local rank, each in its own process group, with the
// environment of its rank; forwards their output line by line with a rank
// prefix; and stops them with SIGTERM, a grace period and SIGKILL. Children
// are always reaped, and die with the launcher's process (Pdeathsig).
//
// It knows nothing of etcd or Kubernetes.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultGrace is how long processes get between SIGTERM and SIGKILL.
const DefaultGrace = 10 * time.Second

// Exit is how a node's processes ended: Code 0 when every process exited 0;
// otherwise the code of the first process that failed, 128+signal for a
// process killed by a signal.
type Exit struct {
	Code    int
	Message string
}

// Config configures a Launcher.
type Config struct {
	// Command is the program and its arguments. Required.
	Command []string
	Dir     string
	// Env is the base environment; the rank variables are set over it.
	Env []string
	// Stdout and Stderr receive the processes' output, each line prefixed
	// with "[rank N] "; os.Stdout and os.Stderr if nil.
	Stdout io.Writer
	Stderr io.Writer
	Logger hclog.Logger
}

// Launcher runs one generation of a node's processes at a time.
type Launcher struct {
	cfg    Config
	logger hclog.Logger
	outMu  sync.Mutex // one line at a time on the shared outputs

	mu      sync.Mutex
	current *group
}

// New validates cfg.
func New(cfg Config) (*Launcher, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("launcher: no command to run")
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Launcher{cfg: cfg, logger: cfg.Logger.Named("launcher")}, nil
}

// group is the processes of one Start.
type group struct {
	procs    []*proc
	exit     chan Exit
	stopping chan struct{} // closed by Stop: exits are no longer failures
	stopOnce sync.Once
	done     chan struct{} // closed when every process is reaped
}

type proc struct {
	rank    int
	cmd     *exec.Cmd
	outputs []*lineWriter
	done    chan struct{}
	exit    Exit
}

// Start runs one process per port of t. The channel receives one Exit when
// every process exited 0, or when one failed and the others were stopped;
// then it closes.
func (l *Launcher) Start(t Topology) (<-chan Exit, error) {
	if len(t.Ports) == 0 {
		return nil, errors.New("launcher: topology without ports")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current != nil {
		select {
		case <-l.current.done:
		default:
			return nil, errors.New("launcher: the previous generation still runs")
		}
	}
	g := &group{exit: make(chan Exit, 1), stopping: make(chan struct{}), done: make(chan struct{})}
	for local := range t.Ports {
		p, err := l.spawn(t, local)
		if err != nil {
			g.stop(0)
			<-g.waitAll()
			return nil, err
		}
		g.procs = append(g.procs, p)
	}
	l.current = g
	go l.supervise(g)
	l.logger.Debug("started", "generation", t.Generation, "processes", len(g.procs))
	return g.exit, nil
}

// spawn starts the process of one local rank; see Spawn.
func (l *Launcher) spawn(t Topology, local int) (*proc, error) {
	rank := t.GlobalRankBase + local
	prefix := fmt.Sprintf("[rank %d] ", rank)
	if t.Role != "" && t.Role != "worker" {
		prefix = fmt.Sprintf("[%s %d] ", t.Role, t.NodeRank)
	}
	cmd := exec.Command(l.cfg.Command[0], l.cfg.Command[1:]...)
	cmd.Dir = l.cfg.Dir
	cmd.Env = mergeEnv(l.cfg.Env, t.Env(local))
	stdout, stderr := newLineWriter(&l.outMu, l.cfg.Stdout, prefix), newLineWriter(&l.outMu, l.cfg.Stderr, prefix)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Output held open by a grandchild must not keep the process unreaped.
	cmd.WaitDelay = 2 * time.Second
	p := &proc{rank: rank, cmd: cmd, outputs: []*lineWriter{stdout, stderr}, done: make(chan struct{})}

	waited, err := Spawn(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", l.cfg.Command[0], err)
	}
	go func() {
		err := <-waited
		for _, w := range p.outputs {
			w.Flush()
		}
		p.exit = exitOf(cmd, err)
		close(p.done)
	}()
	return p, nil
}

// supervise reports the group's exit: the first failure stops the others.
func (l *Launcher) supervise(g *group) {
	defer close(g.exit)
	failed := make(chan *proc, len(g.procs))
	for _, p := range g.procs {
		go func() {
			<-p.done
			if p.exit.Code != 0 {
				failed <- p
			}
		}()
	}
	all := g.waitAll()
	var first *proc
	select {
	case <-all:
	case first = <-failed:
		select {
		case <-g.stopping:
		default:
			l.logger.Info("a process failed; stopping the others", "rank", first.rank, "exit_code", first.exit.Code)
			g.stop(DefaultGrace)
		}
		<-all
	}
	if first == nil {
		for _, p := range g.procs {
			if p.exit.Code != 0 {
				first = p
				break
			}
		}
	}
	close(g.done)
	if first == nil {
		g.exit <- Exit{Code: 0, Message: "every process exited 0"}
		return
	}
	g.exit <- Exit{Code: first.exit.Code, Message: fmt.Sprintf("rank %d: %s", first.rank, first.exit.Message)}
}

// waitAll returns a channel closed when every process is reaped.
func (g *group) waitAll() <-chan struct{} {
	all := make(chan struct{})
	go func() {
		for _, p := range g.procs {
			<-p.done
		}
		close(all)
	}()
	return all
}

// stop signals every process group with SIGTERM and, after grace, SIGKILL.
// It does not wait.
func (g *group) stop(grace time.Duration) {
	g.stopOnce.Do(func() {
		close(g.stopping)
		for _, p := range g.procs {
			signalGroup(p, syscall.SIGTERM)
		}
		go func() {
			timer := time.NewTimer(grace)
			defer timer.Stop()
			select {
			case <-g.waitAll():
				return
			case <-timer.C:
			}
			for _, p := range g.procs {
				signalGroup(p, syscall.SIGKILL)
			}
		}()
	})
}

func signalGroup(p *proc, sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	if p.cmd.Process == nil {
		return
	}
	// The process leads its own group; signal the whole group so that its
	// own children go too.
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Stop stops the running processes: SIGTERM to each process group, up to
// grace for them to exit, then SIGKILL. It returns when every process is
// reaped, or when ctx is done first. Stopping nothing is not an error; Stop
// is safe to call twice.
func (l *Launcher) Stop(ctx context.Context, grace time.Duration) error {
	l.mu.Lock()
	g := l.current
	l.mu.Unlock()
	if g == nil {
		return nil
	}
	g.stop(grace)
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		for _, p := range g.procs {
			signalGroup(p, syscall.SIGKILL)
		}
		<-g.done
		return ctx.Err()
	}
}

// Pids returns the process ids of the running processes, for tests and
// diagnostics.
func (l *Launcher) Pids() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current == nil {
		return nil
	}
	var out []int
	for _, p := range l.current.procs {
		select {
		case <-p.done:
		default:
			out = append(out, p.cmd.Process.Pid)
		}
	}
	return out
}

// exitOf turns Wait's result into an Exit.
func exitOf(cmd *exec.Cmd, err error) Exit {
	state := cmd.ProcessState
	if state == nil {
		return Exit{Code: 1, Message: fmt.Sprintf("not reaped: %v", err)}
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: 128 + int(ws.Signal()), Message: "killed by signal " + ws.Signal().String()}
	}
	code := state.ExitCode()
	if code == 0 {
		return Exit{Code: 0, Message: "exited 0"}
	}
	return Exit{Code: code, Message: fmt.Sprintf("exited with code %d", code)}
}
