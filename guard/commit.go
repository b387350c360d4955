package guard

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
)

// Environment variables the guard gives each training process.
const (
	// EnvFenceSocket names the guard's commit socket, an abstract unix
	// socket written with a leading '@'.
	EnvFenceSocket = "ELASTIC_FENCE_SOCKET"
	// EnvWatchdogSocket names the commit socket of the process's fence
	// watchdog, which answers as the guard does while the guard is frozen;
	// empty when the process has none.
	EnvWatchdogSocket = "ELASTIC_WATCHDOG_SOCKET"
	// EnvCoordinator is the coordinator binary, for `$ELASTIC_COORDINATOR
	// commit SRC DST` from a shell script.
	EnvCoordinator = "ELASTIC_COORDINATOR"
)

// CommitRequest is what a training process asks the guard, one JSON line
// per connection. The answer is one line: "ok", "refused: why" or
// "error: why".
type CommitRequest struct {
	// Op is "rename" (rename Src to Dst if still current) or "check".
	Op         string `json:"op"`
	Generation int64  `json:"generation"`
	Src        string `json:"src,omitempty"`
	Dst        string `json:"dst,omitempty"`
}

// ErrRefused is returned by Commit when the guard or the fence watchdog
// refuses: the process's generation is over or its node fenced out.
var ErrRefused = errors.New("commit refused")

// Validate checks a request read from the socket.
func (r CommitRequest) Validate() error {
	switch r.Op {
	case "check", OpInPlace:
	case "rename":
		if !path.IsAbs(r.Src) || !path.IsAbs(r.Dst) {
			return errors.New("rename needs absolute paths")
		}
	default:
		return fmt.Errorf("unknown op %q: want rename, check or %s", r.Op, OpInPlace)
	}
	if r.Generation < 1 && !(r.Op == OpInPlace && r.Generation == 0) {
		return fmt.Errorf("generation %d: want >= 1", r.Generation)
	}
	return nil
}

// DecodeCommitRequest reads one request line.
func DecodeCommitRequest(line []byte) (CommitRequest, error) {
	var r CommitRequest
	if err := json.Unmarshal(line, &r); err != nil {
		return CommitRequest{}, fmt.Errorf("%w: %v", ErrInvalidMessage, err)
	}
	if err := r.Validate(); err != nil {
		return CommitRequest{}, fmt.Errorf("%w: %v", ErrInvalidMessage, err)
	}
	return r, nil
}

// Commit asks the guard at socket to rename src to dst for a process of
// generation. Without a socket (not under a guard) it renames at once.
func Commit(socket string, generation int64, src, dst string) error {
	return Fence{Guard: socket}.Commit(generation, src, dst)
}

// Check asks the guard whether a process of generation may still commit.
func Check(socket string, generation int64) error {
	return Fence{Guard: socket}.Check(generation)
}

// Fence is where a training process asks for its commits: its fence
// watchdog's socket first, then its guard's.
type Fence struct {
	// Watchdog is the watchdog's socket (EnvWatchdogSocket); "" for none.
	Watchdog string
	// Guard is the guard's socket (EnvFenceSocket); "" outside a guard.
	Guard string
}

// FenceFromEnv is the fence named in a training process's environment.
func FenceFromEnv(getenv func(string) string) Fence {
	return Fence{Watchdog: getenv(EnvWatchdogSocket), Guard: getenv(EnvFenceSocket)}
}

// Commit asks the watchdog to rename src to dst for a process of
// generation, or the guard when the watchdog cannot be reached; the
// watchdog's answer stands. Without a guard it renames at once.
func (f Fence) Commit(generation int64, src, dst string) error {
	if f.Guard == "" {
		return os.Rename(src, dst)
	}
	absSrc, err := absolute(src)
	if err != nil {
		return err
	}
	absDst, err := absolute(dst)
	if err != nil {
		return err
	}
	return f.ask(CommitRequest{Op: "rename", Generation: generation, Src: absSrc, Dst: absDst})
}

// Check asks whether a process of generation may still commit.
func (f Fence) Check(generation int64) error {
	if f.Guard == "" {
		return nil
	}
	return f.ask(CommitRequest{Op: "check", Generation: generation})
}

func (f Fence) ask(req CommitRequest) error {
	if f.Watchdog != "" {
		if conn, err := dialUnix(f.Watchdog, 30*time.Second); err == nil {
			err := exchange(conn, req, "the fence watchdog")
			var gone noAnswerError
			if !errors.As(err, &gone) {
				return err
			}
			// The watchdog went away with the request: killed alone, or
			// with the trainer's tree at a fence. That is no answer; the
			// guard's stands, and a fenced guard refuses.
		}
	}
	return ask(f.Guard, req)
}

// noAnswerError is a connection closed without an answer: the guard going
// away (the node fenced), or a watchdog killed.
type noAnswerError struct {
	who string
	err error
}

func (e noAnswerError) Error() string {
	return fmt.Sprintf("%v: %s did not answer (%v)", ErrRefused, e.who, e.err)
}

func (e noAnswerError) Unwrap() error { return ErrRefused }

func ask(socket string, req CommitRequest) error {
	conn, err := dialUnix(socket, 30*time.Second)
	if err != nil {
		return fmt.Errorf("reach the guard at %s: %w", socket, err)
	}
	return exchange(conn, req, "the guard")
}

// exchange sends req on conn, reads the answer of who (the guard, or the
// fence watchdog) and closes conn.
func exchange(conn *os.File, req CommitRequest, who string) error {
	defer conn.Close()
	line, err := encodeLine(req)
	if err != nil {
		return err
	}
	_, writeErr := conn.Write(line)
	// A guard that refuses the peer answers at once and closes without
	// reading, so the write may fail after the answer has arrived: read
	// it all the same.
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil && writeErr != nil {
		return fmt.Errorf("ask %s: %w", who, writeErr)
	}
	if err != nil {
		// The guard closes the connection without an answer only when it
		// is going away: the node is being fenced. A watchdog does when it
		// is killed, with its trainer's tree.
		return noAnswerError{who: who, err: err}
	}
	reply = strings.TrimSpace(reply)
	switch {
	case reply == "ok":
		return nil
	case strings.HasPrefix(reply, "refused: "):
		return fmt.Errorf("%w: %s", ErrRefused, strings.TrimPrefix(reply, "refused: "))
	default:
		return errors.New(strings.TrimPrefix(reply, "error: "))
	}
}

// commitCall is a request waiting for the guard's loop to answer it: from
// the process pid, over conn, which an in-place trainer's request keeps
// (inplace.go).
type commitCall struct {
	req   CommitRequest
	pid   int
	conn  *os.File
	reply chan string
}

// serveCommits accepts the training processes' requests and hands each to
// the loop, which alone knows the deadline. Only the guard's own
// descendants, of the guard's user, are answered. An in-place trainer's
// connection, once accepted, stays open: what it says on it goes to the
// loop as a trainerSaid on said.
func serveCommits(l *listener, self int, calls chan<- commitCall, said chan<- trainerSaid, done <-chan struct{}) {
	for {
		conn, cred, err := l.accept()
		if err != nil {
			return
		}
		pid := 0
		if cred != nil {
			pid = int(cred.Pid)
		}
		go func() {
			var kept bool
			serveCommit(conn, peerRefused(cred, self), func(req CommitRequest) (string, bool) {
				call := commitCall{req: req, pid: pid, conn: conn, reply: make(chan string, 1)}
				select {
				case calls <- call:
				case <-done:
					return "", false
				}
				select {
				case answer := <-call.reply:
					kept = req.Op == OpInPlace && (answer == "ok" || strings.HasPrefix(answer, "ok\n"))
					return answer, true
				case <-done:
					return "", false
				}
			}, func() bool { return kept })
			if kept {
				listenToTrainer(pid, conn, said, done)
			}
		}()
	}
}

// serveCommit answers the one request of a connection and closes it, unless
// keep says otherwise once it is answered: with refused, when the peer may
// not ask (""), else with what answer decides. answer returns false when
// the server is going away: the connection is closed without an answer.
func serveCommit(conn *os.File, refused string, answer func(CommitRequest) (string, bool), keep func() bool) {
	kept := false
	defer func() {
		if !kept {
			conn.Close()
		}
	}()
	if refused != "" {
		_, _ = conn.Write([]byte("error: " + refused + "\n"))
		return
	}
	line, err := readLine(conn)
	if err != nil {
		return
	}
	req, err := DecodeCommitRequest(line)
	if err != nil {
		_, _ = conn.Write([]byte("error: " + err.Error() + "\n"))
		return
	}
	if reply, ok := answer(req); ok {
		_, _ = conn.Write([]byte(reply + "\n"))
		kept = keep != nil && keep()
	}
}

// readLine reads one line a byte at a time, so that nothing after it is
// taken from the connection: a kept one is read on by listenToTrainer.
func readLine(conn *os.File) ([]byte, error) {
	var line []byte
	b := make([]byte, 1)
	for len(line) < maxCommitLine {
		n, err := conn.Read(b)
		if n == 1 {
			line = append(line, b[0])
			if b[0] == '\n' {
				return line, nil
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("a request longer than %d bytes", maxCommitLine)
}

// maxCommitLine bounds a request: two absolute paths and a few words.
const maxCommitLine = 16 << 10

// commitState is what a commit is decided on: the node's lease, generation
// and deadline as the process that answers knows them, the guard or a
// fence watchdog.
type commitState struct {
	fenced     bool  // no lease, or its processes were killed for it
	generation int64 // the generation the node runs
	killing    bool  // the generation's processes are being killed
	killAt     int64 // the lease deadline, CLOCK_MONOTONIC ns
}

// refusal is the answer that refuses req in state st at now (CLOCK_MONOTONIC
// ns), "" when it may go ahead: the generation must be current, the node
// not fenced and the deadline ahead.
func (st commitState) refusal(req CommitRequest, now int64) string {
	switch {
	case st.fenced:
		return "refused: this node was fenced out: its lease is lost"
	case req.Generation != st.generation:
		return fmt.Sprintf("refused: generation %d is over; this node runs generation %d", req.Generation, st.generation)
	case st.killing:
		return "refused: the processes are being killed"
	case now >= st.killAt:
		return "refused: the lease deadline has passed"
	}
	return ""
}

// carryOut does what an allowed request asks, and is its answer.
func carryOut(req CommitRequest) string {
	if req.Op == "rename" {
		if err := os.Rename(req.Src, req.Dst); err != nil {
			return "error: " + err.Error()
		}
	}
	return "ok"
}

// peerRefused says why the process at the other end may not commit, or ""
// when it may: it must run as the guard's user, below the guard.
func peerRefused(cred *syscall.Ucred, self int) string {
	if cred == nil {
		return "no peer credentials"
	}
	if int(cred.Uid) != os.Getuid() {
		return "another user's process"
	}
	if !IsDescendant(int(cred.Pid), self) {
		return "not a process of this guard"
	}
	return ""
}

// absolute makes p absolute against the working directory.
func absolute(p string) (string, error) {
	if path.IsAbs(p) {
		return path.Clean(p), nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return path.Join(wd, p), nil
}
