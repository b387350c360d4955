package guard

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The fence watchdog is the guard's deadline carried into the training
// process's own freezing domain. The guard holds the deadline and kills at
// it, but a guard frozen together with its sidecar (SIGSTOP of the
// supervisors, a debugger, a stuck runtime) kills nothing while the
// trainer runs on. So for each trainer the guard starts `coordinator
// fence-watch`, a small process in the trainer's process group and cgroup
// leaf, which reads the deadline from the sidecar's DeadlinePage and kills
// the trainer's tree when it passes without a renewal. What freezes the
// trainer freezes its watchdog with it (a SIGSTOP of the group, the
// cgroup's freezer); what freezes only the supervisors leaves it running.

// Descriptors of `coordinator fence-watch` as the guard starts it.
const (
	watchDeadlineFD = 3
	watchPidFD      = 4
)

// watchPoll is how often a watchdog without a pidfd (Linux before 5.3)
// looks whether its trainer is still there.
const watchPoll = 100 * time.Millisecond

// watchLogWait bounds how long a watchdog waits to write why it kills: its
// standard error may be a pipe that nobody drains while the sidecar is
// frozen.
const watchLogWait = 20 * time.Millisecond

// startWatchdog starts the fence watchdog of the trainer pid, which runs
// under lease: in the trainer's process group and cgroup leaf, so that it
// is killed with the trainer's tree and freezes with it. It answers the
// trainer's commits on commits when not nil. It is not a process of the
// run's reports; the run is clear only once it is gone too.
func (s *server) startWatchdog(pid int, lease int64, commits *listener) (int, error) {
	if s.cfg.Deadline == nil {
		return 0, nil
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		// The trainer is the guard's child and not yet reaped: only an old
		// kernel refuses. The watchdog then looks at /proc, where the pid
		// cannot be reused while the watchdog holds its process group.
		pidfd = -1
	}
	args := []string{s.cfg.Executable, "fence-watch", "--deadline-fd", strconv.Itoa(watchDeadlineFD),
		"--pid", strconv.Itoa(pid), "--lease", strconv.FormatInt(lease, 10)}
	files := []uintptr{s.devnull.Fd(), s.devnull.Fd(), uintptr(syscall.Stderr), s.cfg.Deadline.Fd()}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
		args = append(args, "--pidfd", strconv.Itoa(watchPidFD))
		files = append(files, uintptr(pidfd))
	}
	if commits != nil {
		args = append(args, "--commit-fd", strconv.Itoa(len(files)), "--generation", strconv.FormatInt(s.gen, 10))
		files = append(files, uintptr(commits.fd))
	}
	// No Pdeathsig: the watchdog must outlive a guard that stops; it ends
	// with its trainer, which a guard that dies takes with it.
	sys := &syscall.SysProcAttr{Setpgid: true, Pgid: pid}
	if s.cg != nil {
		sys.UseCgroupFD, sys.CgroupFD = true, s.cg.fd()
	}
	env := withEnv(os.Environ(), EnvGuardID+"="+s.cfg.Marker)
	watchdog, err := syscall.ForkExec("/proc/self/exe", args, &syscall.ProcAttr{Env: env, Files: files, Sys: sys})
	if err != nil {
		return 0, fmt.Errorf("start the fence watchdog of process %d: %w", pid, err)
	}
	return watchdog, nil
}

// watchTracked starts the watchdogs of the current run's processes that
// have none yet. A process whose watchdog cannot start may not run: the
// run is killed, and its processes' exits say so.
func (s *server) watchTracked() {
	defer s.commits.release() // the watchdogs started hold theirs
	r := s.cur
	if r == nil || len(r.unwatched) == 0 {
		return
	}
	pids := r.unwatched
	r.unwatched = nil
	if s.killing {
		return // they are being killed
	}
	for _, pid := range pids {
		if _, running := r.procs[pid]; !running {
			continue
		}
		watchdog, err := s.startWatchdog(pid, s.lease, s.commits.take(pid))
		if err != nil {
			fmt.Fprintf(s.cfg.Stderr, "%s guard: %v; killed the generation's processes\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), err)
			s.clearOwed = true
			s.killTree()
			return
		}
		if watchdog != 0 {
			r.watchdogs[pid] = watchdog
		}
	}
}

// endWatchdog kills the watchdog of a process that was reaped: it would
// exit on its own, but a start that follows at once must not find it.
func (r *run) endWatchdog(pid int) {
	if w, ok := r.watchdogs[pid]; ok {
		_ = syscall.Kill(w, syscall.SIGKILL)
	}
}

// reapedWatchdog forgets a watchdog that was reaped.
func (r *run) reapedWatchdog(pid int) {
	for watched, w := range r.watchdogs {
		if w == pid {
			delete(r.watchdogs, watched)
			return
		}
	}
}

// awaitWatchdogs reaps the watchdogs of the processes that were reaped,
// which endWatchdog killed, and reports whether there were any.
func (r *run) awaitWatchdogs() bool {
	waited := false
	for watched, w := range r.watchdogs {
		if _, running := r.procs[watched]; running {
			continue
		}
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(w, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		delete(r.watchdogs, watched)
		waited = true
	}
	return waited
}

// WatchMain is `coordinator fence-watch --deadline-fd N --pid P --lease L
// [--pidfd M] [--commit-fd C --generation G]`, started by the guard beside
// each training process: it kills process P's tree once the deadline of
// lease L on the page at descriptor N has passed, or the page holds
// another lease or none, and exits when P exits. With --commit-fd it
// answers the commits of P's tree, of generation G, on the socket at
// descriptor C. It returns the exit code.
func WatchMain(args []string, stderr io.Writer) int {
	var a watchArgs
	if err := a.parse(args); err != nil {
		fmt.Fprintln(stderr, usageLine("fence-watch", err, "started by the guard only: "+watchUsage))
		return 2
	}
	// Started from /proc/self/exe, its name would be "exe" in pstree and
	// top: it is the fence watchdog.
	_ = os.WriteFile("/proc/self/comm", []byte("fence-watch"), 0)
	// A graceful stop sends SIGTERM to the trainer's process group, which
	// the watchdog is in: it stays until the trainer is gone.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	view, err := openDeadlineView(a.deadlineFD)
	if err != nil {
		fmt.Fprintf(stderr, "coordinator fence-watch: %v\n", err)
		return 2
	}
	_ = unix.Close(a.deadlineFD) // the mapping stays
	w := &watchdog{view: view, pid: a.pid, lease: a.lease, gen: a.gen, pidfd: a.pidfd, stderr: stderr}
	if a.commitFD >= 0 {
		syscall.CloseOnExec(a.commitFD)
		if runLeaf() != "" {
			w.leaf = cgroupOf("self")
		}
		go w.serveCommits(&listener{fd: a.commitFD})
	}
	w.run()
	return 0
}

// watchUsage is the fence watchdog's command line.
const watchUsage = "fence-watch --deadline-fd N --pid P --lease L [--pidfd M] [--commit-fd C --generation G]"

// watchArgs are the fence watchdog's flags.
type watchArgs struct {
	deadlineFD, pid, pidfd, commitFD int
	lease, gen                       int64
}

func (a *watchArgs) flags() *flag.FlagSet {
	fs := newFlags("fence-watch")
	fs.IntVar(&a.deadlineFD, "deadline-fd", -1, "descriptor of the deadline page")
	fs.IntVar(&a.pid, "pid", 0, "the training process")
	fs.Int64Var(&a.lease, "lease", 0, "the lease it runs under")
	fs.IntVar(&a.pidfd, "pidfd", -1, "descriptor of the training process's pidfd")
	fs.IntVar(&a.commitFD, "commit-fd", -1, "descriptor of the socket to answer the training process's commits on")
	fs.Int64Var(&a.gen, "generation", 0, "the generation of the training process")
	return fs
}

// parse reads the fence watchdog's command line, or says what is wrong
// with it.
func (a *watchArgs) parse(args []string) error {
	fs := a.flags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 || a.deadlineFD < 0 || a.pid <= 1 || a.lease == 0 || (a.commitFD >= 0 && a.gen < 1) {
		return errors.New("a flag is missing or out of range")
	}
	return nil
}

// watchdog watches one training process.
type watchdog struct {
	view   *deadlineView
	pid    int
	lease  int64
	gen    int64  // the trainer's generation, for its commits
	leaf   string // its cgroup when it is a run's leaf, "" otherwise
	pidfd  int    // -1 without one
	stderr io.Writer
	once   sync.Once
	killed atomic.Bool // its kill began: no commit from then on
}

// run returns once it killed the trainer, or, without a pidfd, once the
// trainer exited; with one, awaitExit ends the process when the trainer
// exits.
func (w *watchdog) run() {
	if w.pidfd >= 0 {
		go w.awaitExit()
	}
	for {
		lease, killAt, seq := w.view.load()
		if lease != w.lease || killAt == 0 || MonoNow() >= killAt {
			w.kill()
			return
		}
		if w.pidfd < 0 {
			killAt = min(killAt, MonoNow()+int64(watchPoll))
		}
		w.view.wait(seq, killAt)
		if w.pidfd < 0 && !running(w.pid) {
			w.exited()
			return
		}
	}
}

// awaitExit waits on the trainer's pidfd, and ends the process when the
// trainer exits.
func (w *watchdog) awaitExit() {
	for {
		n, err := unix.Ppoll([]unix.PollFd{{Fd: int32(w.pidfd), Events: unix.POLLIN}}, nil, nil)
		if err == nil && n > 0 {
			w.exited()
			os.Exit(0)
		}
	}
}

// exited handles the trainer's exit: what it left must not run past the
// deadline either.
func (w *watchdog) exited() {
	lease, killAt, _ := w.view.load()
	if lease != w.lease || killAt == 0 || MonoNow() >= killAt {
		w.kill()
	}
}

// running reports whether pid is there and not a zombie.
func running(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	fields := strings.Fields(string(data[i+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// kill kills the trainer's tree, and the watchdog with it, once: the
// trainer and its descendants, stopped first so that none forks out of
// reach while they are found; then the cgroup leaf when the guard put it
// in one; then its process group, which the watchdog is in.
func (w *watchdog) kill() {
	w.once.Do(func() {
		w.killed.Store(true)
		stopped := []int{w.pid}
		_ = syscall.Kill(w.pid, syscall.SIGSTOP)
		seen := map[int]bool{w.pid: true, os.Getpid(): true}
		for fresh := true; fresh; {
			fresh = false
			for _, p := range Descendants(w.pid) {
				if !seen[p] {
					seen[p], fresh = true, true
					_ = syscall.Kill(p, syscall.SIGSTOP)
					stopped = append(stopped, p)
				}
			}
		}
		for _, p := range stopped {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		w.log()
		if leaf := runLeaf(); leaf != "" {
			_ = KillCgroup(leaf)
		}
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
	})
}

// log says why the watchdog killed, without waiting on a pipe that nobody
// drains.
func (w *watchdog) log() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fmt.Fprintf(w.stderr, "%s fence-watch: the lease deadline passed without a renewal; killed training process %d and its tree\n",
			time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), w.pid)
	}()
	select {
	case <-done:
	case <-time.After(watchLogWait):
	}
}

// runLeaf is the calling process's cgroup when it is a guard's leaf of one
// start (elastic-guard-PID/run-N), "" otherwise: a watchdog the guard
// could not put in a leaf must not kill the cgroup it shares with the
// sidecar.
func runLeaf() string {
	dir, err := OwnCgroupDir()
	if err != nil {
		return ""
	}
	if !strings.HasPrefix(path.Base(dir), "run-") || !strings.HasPrefix(path.Base(path.Dir(dir)), "elastic-guard-") {
		return ""
	}
	return dir
}
