package guard

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The fence watchdog answers its trainer's commits. A guard frozen with its
// sidecar answers none, while the trainer runs on until its watchdog kills
// it at the deadline: every checkpoint it makes meanwhile waits on the
// guard and is lost. So each watchdog answers the commits of its trainer's
// tree too, on an abstract unix socket of its own, with the guard's rules
// (commitState) on what it knows: the generation it was started for, and
// its lease and deadline on the DeadlinePage. It renames itself.
//
// The socket is the guard's before it is the watchdog's. Before it starts
// a process, the guard binds @elastic-watch-GUARDPID-MARKER-SEQ-SLOT (the
// start command's seq, the process's slot) and puts that name in the
// process's environment (EnvWatchdogSocket), so the name is known before
// the process runs, and nothing else holds it while the process can ask.
// The guard hands the bound socket to the watchdog (--commit-fd) and closes
// its own copy. A request made before the watchdog runs waits in the
// socket's backlog for it. A trainer's clients ask the watchdog first and
// the guard when the watchdog cannot be reached: without a deadline page
// there is none (the variable is empty), and one killed alone is gone.
//
// A commit the watchdog answers never renames once the generation is over
// on this node:
//
//   - A stop: the guard marks the run killing and SIGKILLs its cgroup leaf,
//     its process groups and every descendant before it does anything
//     else, and the watchdog is in all three. It reports the node clear,
//     and so lets the next generation start, only once it has reaped every
//     child, the watchdog included. A rename the watchdog had begun
//     completes before it dies, as one of the guard's completes before its
//     loop can kill; a SIGKILLed process that dies within the fence margin
//     is the design's assumption for trainers too.
//   - A stop with a grace period: the guard answers commits until the grace
//     ends (it is not yet killing), and so does the watchdog, which ignores
//     the SIGTERM; at the grace's end the stop goes on as above.
//   - The deadline: the watchdog checks it itself, on the page, right
//     before the rename, as the guard does on its own copy. The page's
//     deadline is the one the sidecar derives from its last renewal and
//     writes before it tells the guard, so it is never past what the
//     lease allows.
//   - A fence: the sidecar writes deadline 0 (or a new lease) to the page
//     before it tells the guard, and the watchdog refuses from then on. A
//     watchdog that killed its trainer's tree refuses too.
//   - Another generation: the watchdog compares the request's generation
//     with the one it was started for; the guard starts no generation
//     while a watchdog of the last one is left.

// watchSocketPrefix starts the name of a watchdog's commit socket.
const watchSocketPrefix = "@elastic-watch-"

// watchSockets are the commit sockets of the watchdogs of a start while the
// guard holds them: each bound before its process starts, and closed in
// the guard at the end of the loop's turn (watchTracked), once its
// watchdog holds it or will get none.
type watchSockets struct {
	next  *listener         // bound for the process being started
	byPid map[int]*listener // by the pid of the process each is for
	held  []*listener       // every one, to close
}

// watchCommitEnv binds the commit socket of the watchdog of the process
// about to start in slot, by the start command seq, and returns env with
// its name (empty without one: no deadline page, or the name is taken).
// track gives the socket to the process's pid.
func (s *server) watchCommitEnv(seq int64, slot int, env []string) []string {
	s.commits.next = nil
	if s.cfg.Deadline == nil {
		return withEnv(env, EnvWatchdogSocket+"=")
	}
	name := watchSocketPrefix + strconv.Itoa(s.self) + "-" + s.cfg.Marker + "-" +
		strconv.FormatInt(seq, 10) + "-" + strconv.Itoa(slot)
	l, err := listenUnix(name)
	if err != nil {
		fmt.Fprintf(s.cfg.Stderr, "%s guard: fence watchdog's commit socket: %v; its process commits through the guard alone\n",
			time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), err)
		return withEnv(env, EnvWatchdogSocket+"=")
	}
	s.commits.next = l
	s.commits.held = append(s.commits.held, l)
	return withEnv(env, EnvWatchdogSocket+"="+name)
}

// claim gives the socket bound for the process being started to its pid.
func (c *watchSockets) claim(pid int) {
	if c.next == nil {
		return
	}
	if c.byPid == nil {
		c.byPid = map[int]*listener{}
	}
	c.byPid[pid], c.next = c.next, nil
}

// take is the socket of the watchdog of pid, nil if none.
func (c *watchSockets) take(pid int) *listener {
	l := c.byPid[pid]
	delete(c.byPid, pid)
	return l
}

// release closes the guard's copies. A plain close: a shutdown would end
// the socket for the watchdog that holds it too. A socket no watchdog
// holds is gone, and a request waiting in it is answered by its end.
func (c *watchSockets) release() {
	if len(c.held) == 0 {
		return
	}
	for _, l := range c.held {
		_ = syscall.Close(l.fd)
	}
	*c = watchSockets{}
}

// serveCommits answers the commits of the trainer's tree on l, on many
// goroutines: each reads the page itself. It closes l on a failure, so that
// clients ask the guard rather than wait.
func (w *watchdog) serveCommits(l *listener) {
	defer l.Close()
	for {
		conn, cred, err := l.accept()
		if err != nil {
			return
		}
		go serveCommit(conn, w.peerRefused(cred), func(req CommitRequest) (string, bool) {
			return w.answer(req), true
		}, nil)
	}
}

// answer decides a commit request with the guard's rules, on the lease and
// deadline of the page now, and renames when they allow it.
func (w *watchdog) answer(req CommitRequest) string {
	if req.Op == OpInPlace {
		return "refused: an in-place trainer registers with its guard, not with its watchdog"
	}
	lease, killAt, _ := w.view.load()
	st := commitState{fenced: lease != w.lease || killAt == 0 || w.killed.Load(), generation: w.gen, killAt: killAt}
	if refused := st.refusal(req, MonoNow()); refused != "" {
		return refused
	}
	return carryOut(req)
}

// peerRefused says why the process at the other end may not commit here,
// or "" when it may: it must run as the watchdog's user, and be what the
// watchdog's kill reaches: the trainer or one of its descendants, a process
// of its process group, or of its cgroup leaf.
func (w *watchdog) peerRefused(cred *syscall.Ucred) string {
	if cred == nil {
		return "no peer credentials"
	}
	if int(cred.Uid) != os.Getuid() {
		return "another user's process"
	}
	pid := int(cred.Pid)
	if pid == w.pid || IsDescendant(pid, w.pid) {
		return ""
	}
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == w.pid {
		return ""
	}
	if w.leaf != "" && cgroupOf(strconv.Itoa(pid)) == w.leaf {
		return ""
	}
	return "not a process of this trainer"
}

// cgroupOf is the cgroup v2 path of a process (a pid, or "self"), "" when
// it has none or is gone.
func cgroupOf(pid string) string {
	data, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}
