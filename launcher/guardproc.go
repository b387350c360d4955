package launcher

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/guard"
)

// errGuardDied is returned by calls that were waiting on a guard that died.
var errGuardDied = errors.New("launcher: the process guard died")

// guardProc is a running guard process and the launcher's end of its
// socket.
type guardProc struct {
	cmd    *exec.Cmd
	conn   *os.File
	marker string
	// stdout and stderr carry the guard's output; nil where the writer is a
	// file the guard writes to itself.
	stdout, stderr *outputPipe

	writeMu sync.Mutex
	seq     atomic.Int64
	// warmSlots is how many warm interpreters the guard was asked to keep;
	// warmSettled, by slot, whether its interpreter is ready (true) or the
	// slot starts cold (false), absent while one imports. Both guarded by
	// the launcher's mutex.
	warmSlots   int
	warmSettled map[int]bool
	// spareSlots is how many started spares the guard was asked to keep
	// (Config.InPlace); parked, by slot, whether the slot holds a parked
	// trainer: a survivor of the last generation, or a spare whose
	// start-up is done.
	spareSlots int
	parked     map[int]bool

	mu       sync.Mutex
	pid      int
	cgroup   string
	waiters  map[int64]chan guard.Report
	clearSeq int64
	cleared  chan struct{} // closed and replaced at each clear report

	ready chan struct{}
	dead  chan struct{} // closed once the guard exited and its socket is drained

	// ended is set once the launcher killed the guard or closed its
	// socket: it did not die by itself.
	ended atomic.Bool
}

// closeOurEnd closes the write end of a pipe once the guard has it; a file
// that was the caller's own writer stays open.
func closeOurEnd(p *outputPipe, w *os.File) {
	if p != nil {
		w.Close()
	}
}

// outputWait bounds how long an exit report waits for the output before it.
const outputWait = 2 * time.Second

// guardHooks receive what the guard reports on its own.
type guardHooks struct {
	exit   func(guard.Report)
	fenced func(lease int64)
	warm   func(*guardProc, guard.Report)
	// watch hears EventHung and EventProgress; nil: nobody.
	watch func(guard.Report)
	// parked hears EventParked, EventUnparked and EventSpareLost; nil:
	// nobody.
	parked func(*guardProc, guard.Report)
}

// deadlineFD is the descriptor of the deadline page in the guard: the
// second of exec.Cmd.ExtraFiles, after the control socket.
const deadlineFD = guard.ControlFD + 1

// startGuard starts the guard, with the deadline page when there is one,
// and waits until it is ready.
func startGuard(argv []string, env []string, stdout, stderr io.Writer, page *guard.DeadlinePage, hooks guardHooks) (*guardProc, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("guard socket: %w", err)
	}
	// Non-blocking, so that writes to a guard that stopped reading time out.
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, fmt.Errorf("guard socket: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "guard-control")
	theirs := os.NewFile(uintptr(fds[1]), "guard-control")
	g := &guardProc{
		conn: ours, marker: newMarker(), waiters: map[int64]chan guard.Report{},
		cleared: make(chan struct{}), ready: make(chan struct{}), dead: make(chan struct{}),
	}
	args := append(append([]string(nil), argv[1:]...), "--marker", g.marker)
	if page != nil {
		args = append(args, "--deadline-fd", strconv.Itoa(deadlineFD))
	}
	cmd := exec.Command(argv[0], args...)
	cmd.Env = env
	var outW, errW *os.File
	if g.stdout, outW, err = newOutputPipe(stdout); err == nil {
		g.stderr, errW, err = newOutputPipe(stderr)
	}
	if err != nil {
		ours.Close()
		theirs.Close()
		closeOurEnd(g.stdout, outW)
		return nil, fmt.Errorf("guard output: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = []*os.File{theirs}
	if page != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, page.File())
	}
	g.cmd = cmd
	err = cmd.Start()
	theirs.Close()
	closeOurEnd(g.stdout, outW)
	closeOurEnd(g.stderr, errW)
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("start the process guard: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	go g.read(hooks, waited)
	select {
	case <-g.ready:
		return g, nil
	case <-g.dead:
		return nil, errors.New("launcher: the process guard exited at start")
	case <-time.After(30 * time.Second):
		g.kill()
		<-g.dead
		return nil, errors.New("launcher: the process guard did not start within 30s")
	}
}

// read dispatches the guard's reports until its socket closes, then waits
// for the process.
func (g *guardProc) read(hooks guardHooks, waited <-chan error) {
	r := bufio.NewReader(g.conn)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break
		}
		rep, err := guard.DecodeReport(line)
		if err != nil {
			continue
		}
		switch rep.Event {
		case guard.EventReady:
			g.mu.Lock()
			g.pid, g.cgroup = rep.Pid, rep.Cgroup
			g.mu.Unlock()
			close(g.ready)
		case guard.EventStarted, guard.EventStartFailed:
			g.mu.Lock()
			ch := g.waiters[rep.Seq]
			delete(g.waiters, rep.Seq)
			g.mu.Unlock()
			if ch != nil {
				ch <- rep
			}
		case guard.EventExit:
			g.stdout.reached(rep.StdoutBytes, outputWait)
			g.stderr.reached(rep.StderrBytes, outputWait)
			hooks.exit(rep)
		case guard.EventClear:
			g.mu.Lock()
			if rep.Seq > g.clearSeq {
				g.clearSeq = rep.Seq
			}
			close(g.cleared)
			g.cleared = make(chan struct{})
			g.mu.Unlock()
		case guard.EventFenced:
			hooks.fenced(rep.Lease)
		case guard.EventWarm, guard.EventWarmReady, guard.EventWarmLost:
			if hooks.warm != nil {
				hooks.warm(g, rep)
			}
		case guard.EventHung, guard.EventProgress:
			if hooks.watch != nil {
				hooks.watch(rep)
			}
		case guard.EventParked, guard.EventUnparked, guard.EventSpareLost:
			if hooks.parked != nil {
				hooks.parked(g, rep)
			}
		}
	}
	g.conn.Close()
	<-waited
	// As exec.Cmd.Wait would: the guard's last output is written out
	// before it counts as gone.
	g.stdout.reached(math.MaxInt64, outputWait)
	g.stderr.reached(math.MaxInt64, outputWait)
	close(g.dead)
}

// send writes one command and returns its sequence number. A reply
// channel, if given, receives the command's answer.
func (g *guardProc) send(c guard.Command, reply chan guard.Report) (int64, error) {
	g.writeMu.Lock()
	defer g.writeMu.Unlock()
	c.Seq = g.seq.Add(1)
	line, err := guard.EncodeCommand(c)
	if err != nil {
		return 0, err
	}
	if reply != nil {
		g.mu.Lock()
		g.waiters[c.Seq] = reply
		g.mu.Unlock()
	}
	_ = g.conn.SetWriteDeadline(time.Now().Add(guardTimeout))
	if _, err := g.conn.Write(line); err != nil {
		g.mu.Lock()
		delete(g.waiters, c.Seq)
		g.mu.Unlock()
		return 0, fmt.Errorf("tell the process guard: %w", err)
	}
	return c.Seq, nil
}

// await waits for the answer to a command sent with reply channel ch.
func (g *guardProc) await(ch <-chan guard.Report, timeout time.Duration) (guard.Report, error) {
	select {
	case rep := <-ch:
		return rep, nil
	case <-g.dead:
		return guard.Report{}, errGuardDied
	case <-time.After(timeout):
		return guard.Report{}, fmt.Errorf("launcher: the process guard did not answer within %s", timeout)
	}
}

// awaitClear waits until the guard reports that nothing is left after
// command seq, or until stop is closed.
func (g *guardProc) awaitClear(seq int64, stop <-chan struct{}) error {
	for {
		g.mu.Lock()
		done, wait := g.clearSeq >= seq, g.cleared
		g.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-wait:
		case <-g.dead:
			return errGuardDied
		case <-stop:
			return errors.New("launcher: gave up waiting for the processes to exit")
		}
	}
}

// kill ends the guard at once; its processes die with it (Pdeathsig) and
// what they leave is swept by the caller.
func (g *guardProc) kill() {
	g.ended.Store(true)
	if g.cmd.Process != nil {
		_ = g.cmd.Process.Kill()
	}
}

// close closes the socket: the guard kills every process and exits.
func (g *guardProc) close() {
	g.ended.Store(true)
	_ = g.conn.Close()
}

func (g *guardProc) cgroupPath() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cgroup
}

// info says how to find what the guard runs.
func (g *guardProc) info() GuardInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return GuardInfo{Pid: g.pid, Marker: g.marker, Cgroup: g.cgroup}
}
