package guard

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// bootstrap is the Python source a warm interpreter runs (-c): it imports
// the preload modules, waits for its go message on descriptor 3, and
// becomes the user's command.
//
//go:embed warm.py
var bootstrap string

// warmDelay is how long after a warm interpreter is used (or lost) its
// replacement starts: the replacement's imports (a second of CPU for torch)
// must not compete for the CPU with the trainers that are restarting at
// that moment, whose start is what the job waits for.
const warmDelay = time.Second

// goPipeSize is the go pipe's capacity, asked of the kernel so that a large
// environment fits in one non-blocking write; the unprivileged maximum
// (fs.pipe-max-size) by default.
const goPipeSize = 1 << 20

// warmProc is an idle warm interpreter.
type warmProc struct {
	tmpl Warm
	proc *proc
	out  *lineWriter // retargeted when used
	err  *lineWriter
	goW  int // write end of its go pipe, non-blocking; -1 once closed
}

// warmState is the guard's warm interpreters.
type warmState struct {
	tmpl     map[int]Warm      // by slot
	idle     map[int]*warmProc // by slot
	byPid    map[int]*warmProc
	killed   map[int]bool // pids killed by the guard, until reaped
	disabled map[int]bool // slots whose interpreter exited by itself
	timer    *time.Timer
	armed    bool
	cg       *cgroup  // the leaf of the idle ones
	ready    chan int // pids whose interpreter said it is ready
}

func newWarmState() warmState {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return warmState{tmpl: map[int]Warm{}, idle: map[int]*warmProc{}, byPid: map[int]*warmProc{},
		killed: map[int]bool{}, disabled: map[int]bool{}, timer: t, ready: make(chan int, 16)}
}

// setWarm takes OpWarm's templates: slots whose template changed lose
// their interpreter.
func (s *server) setWarm(ws []Warm) {
	tmpl := map[int]Warm{}
	for _, w := range ws {
		if w.Path == "" {
			w.Path = w.Argv[0]
		}
		tmpl[w.Slot] = w
	}
	for slot, w := range s.warm.idle {
		if t, ok := tmpl[slot]; !ok || !reflect.DeepEqual(t, w.tmpl) {
			s.killWarm(w)
		}
	}
	s.warm.tmpl = tmpl
	clear(s.warm.disabled)
}

// isIdleWarm reports whether pid is an idle warm interpreter, which a stop
// leaves alone and a clear does not wait for.
func (s *server) isIdleWarm(pid int) bool {
	w, ok := s.warm.byPid[pid]
	return ok && s.warm.idle[w.tmpl.Slot] == w
}

// armWarm schedules the start of the missing warm interpreters, unless the
// node is fenced or nothing is missing. Before the guard's first start
// they start at once, in this turn, so that a start the sidecar sent
// after them finds them: no trainer of this guard's is restarting to
// compete with their imports for the CPU. That is the node's first
// generation, whose warm interpreters the sidecar waits for before it
// registers, so that it starts warm while the job trains on without it;
// or the next generation of a node whose guard died, whose new guard warms
// while the job stops and restarts. Later, after warmDelay.
func (s *server) armWarm() {
	if s.warm.armed || !s.mayWarm() || !s.warmMissing() {
		return
	}
	if s.cur == nil {
		s.fillWarm()
		return
	}
	s.warm.armed = true
	s.warm.timer.Reset(warmDelay)
}

// mayWarm reports whether warm interpreters may run: not once the node is
// fenced or its deadline passed, nor while the guard kills or closes. An
// interpreter started before the first lease holds no rank, and a start
// needs a lease.
func (s *server) mayWarm() bool {
	return !s.closing && !s.killing && !s.fenced && (s.lease == 0 || MonoNow() < s.killAt)
}

func (s *server) warmMissing() bool {
	for slot := range s.warm.tmpl {
		if s.warm.idle[slot] == nil && !s.warm.disabled[slot] {
			return true
		}
	}
	return false
}

// fillWarm starts the missing warm interpreters.
func (s *server) fillWarm() {
	s.warm.armed = false
	if !s.mayWarm() {
		return
	}
	for slot, t := range s.warm.tmpl {
		if s.warm.idle[slot] != nil || s.warm.disabled[slot] {
			continue
		}
		pid, err := s.startWarm(t)
		if err != nil {
			s.warm.disabled[slot] = true
			fmt.Fprintf(s.cfg.Stderr, "%sguard: warm interpreter: %v; this slot starts cold\n", t.Prefix, err)
			s.out.send(Report{Event: EventWarmLost, Seq: s.seq, Rank: slot})
			continue
		}
		s.out.send(Report{Event: EventWarm, Seq: s.seq, Rank: slot, Pid: pid})
	}
}

// startWarm execs a fresh interpreter for template t, in its own process
// group, tied to the guard by Pdeathsig, in the warm leaf of the guard's
// cgroup where it has one.
func (s *server) startWarm(t Warm) (int, error) {
	py, err := ParsePython(t.Argv)
	if err != nil {
		return 0, err
	}
	dir := t.Dir
	if dir == "" {
		dir, _ = os.Getwd()
	}
	argv := append([]string{t.Argv[0]}, py.Options...)
	argv = append(append(argv, "-c", bootstrap, py.path0(dir)), t.Preload...)
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return 0, fmt.Errorf("go pipe: %w", err)
	}
	_, _ = unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, goPipeSize)
	if err := syscall.SetNonblock(p[1], true); err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return 0, fmt.Errorf("go pipe: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return 0, fmt.Errorf("ready pipe: %w", err)
	}
	if s.warm.cg == nil && s.cgRoot != nil {
		s.warm.cg, _ = s.cgRoot.newLeaf("warm-" + strconv.Itoa(s.cgRoot.runs))
	}
	// The go pipe's read end becomes descriptor 3, the first after stdin,
	// stdout and stderr, where the bootstrap reads its go message; the
	// ready pipe's write end descriptor 4, where it says it has imported;
	// its progress page, if the kernel has memfds, descriptor 5, which the
	// go message names.
	extra := []uintptr{uintptr(p[0]), readyW.Fd()}
	page, err := newProgressPage()
	if err == nil {
		extra = append(extra, uintptr(page.fd))
	}
	env := withEnv(withoutEnv(t.Env, EnvProgressFD), EnvFenceSocket+"="+s.socket, EnvCoordinator+"="+s.cfg.Executable, EnvGuardID+"="+s.cfg.Marker)
	pr, outW, errW, err := s.spawn(Proc{Rank: t.Slot, Path: t.Path, Argv: argv, Env: env, Dir: t.Dir, Prefix: t.Prefix},
		s.warm.cg, extra, s.cfg.Stderr, s.cfg.Stderr, nil)
	syscall.Close(p[0])
	readyW.Close()
	if err != nil {
		page.close()
		syscall.Close(p[1])
		readyR.Close()
		return 0, err
	}
	if page != nil {
		page.closeFD()
	}
	pr.page = page
	go s.awaitReady(pr.pid, readyR)
	w := &warmProc{tmpl: t, proc: pr, out: outW, err: errW, goW: p[1]}
	s.warm.idle[t.Slot] = w
	s.warm.byPid[pr.pid] = w
	return pr.pid, nil
}

// killWarm kills a warm interpreter and what it started; it is reaped as
// any child.
func (s *server) killWarm(w *warmProc) {
	if s.warm.idle[w.tmpl.Slot] == w {
		delete(s.warm.idle, w.tmpl.Slot)
	}
	s.closeGo(w)
	s.warm.killed[w.proc.pid] = true
	_ = syscall.Kill(-w.proc.pid, syscall.SIGKILL)
	_ = syscall.Kill(w.proc.pid, syscall.SIGKILL)
	s.children = true // it counts until reaped
}

func (s *server) closeGo(w *warmProc) {
	if w.goW >= 0 {
		syscall.Close(w.goW)
		w.goW = -1
	}
}

// killAllWarm kills every warm interpreter: the node is fenced.
func (s *server) killAllWarm() {
	for _, w := range s.warm.idle {
		s.killWarm(w)
	}
	if s.warm.cg != nil {
		_ = s.warm.cg.kill()
	}
}

// warmReaped forgets a warm interpreter that exited. One that exited by
// itself (a preload that failed to import) leaves its slot cold.
func (s *server) warmReaped(pid int, ws syscall.WaitStatus) {
	w, ok := s.warm.byPid[pid]
	if !ok {
		return
	}
	delete(s.warm.byPid, pid)
	w.proc.page.close()
	w.proc.page = nil
	if s.warm.killed[pid] {
		delete(s.warm.killed, pid)
		return
	}
	if s.warm.idle[w.tmpl.Slot] == w {
		delete(s.warm.idle, w.tmpl.Slot)
		s.closeGo(w)
		s.warm.disabled[w.tmpl.Slot] = true
		fmt.Fprintf(s.cfg.Stderr, "%sguard: the warm interpreter exited before it was used (code %d); this slot starts cold\n",
			w.tmpl.Prefix, ws.ExitStatus())
		s.out.send(Report{Event: EventWarmLost, Seq: s.seq, Rank: w.tmpl.Slot})
	}
}

// warmIsReady reports the warm interpreter pid ready, if it is still idle.
func (s *server) warmIsReady(pid int) {
	if w, ok := s.warm.byPid[pid]; ok && s.warm.idle[w.tmpl.Slot] == w {
		s.out.send(Report{Event: EventWarmReady, Seq: s.seq, Rank: w.tmpl.Slot, Pid: pid})
	}
}

// awaitReady tells the loop of pid's ready byte on r, if it comes; the
// read ends when the interpreter writes it, closes its end or exits.
func (s *server) awaitReady(pid int, r *os.File) {
	defer r.Close()
	var b [1]byte
	if n, _ := r.Read(b[:]); n == 1 {
		s.warm.ready <- pid
	}
}

// warmSignalled handles a warm interpreter that was stopped or continued:
// one that was frozen is never used, since it may have been frozen across a
// fence and thawed later; it is killed and replaced.
func (s *server) warmSignalled(pid int) {
	if w, ok := s.warm.byPid[pid]; ok && s.warm.idle[w.tmpl.Slot] == w {
		s.killWarm(w)
	}
}

// useWarm makes the idle warm interpreter of slot, if there is a healthy
// one for p's command, the process of p: it is moved into the run's leaf,
// its output retargeted, and sent its go message. It returns nil to start
// cold. Its progress page, written generation gen, is named in the go
// message's environment.
func (s *server) useWarm(slot int, p Proc, env []string, gen int64) *warmProc {
	w := s.warm.idle[slot]
	if w == nil {
		return nil
	}
	if w.tmpl.Path != p.Path || !reflect.DeepEqual(w.tmpl.Argv, p.Argv) || w.tmpl.Dir != p.Dir {
		return nil
	}
	if w.proc.page != nil {
		env = withEnv(env, EnvProgressFD+"="+strconv.Itoa(progressFDWarm))
	}
	msg, err := goMessage(p, env)
	if err != nil {
		return nil // not sayable in JSON: it runs cold, as given
	}
	if st := procState(w.proc.pid); st != 'R' && st != 'S' && st != 'D' {
		s.killWarm(w) // stopped, traced, a zombie, or gone
		return nil
	}
	if s.cg != nil && moveInto(s.cg, w.proc.pid) != nil {
		s.killWarm(w)
		return nil
	}
	// Its output is the trainer's before the script can print anything,
	// and its page is the generation's before it can read it.
	if w.proc.page != nil {
		w.proc.page.setGeneration(gen)
	}
	s.retarget(w, p)
	n, err := syscall.Write(w.goW, msg)
	s.closeGo(w)
	if err != nil || n != len(msg) {
		w.out.set(s.cfg.Stderr, w.tmpl.Prefix, nil)
		w.err.set(s.cfg.Stderr, w.tmpl.Prefix, nil)
		s.killWarm(w) // a full pipe: it is not reading
		return nil
	}
	delete(s.warm.idle, slot)
	delete(s.warm.byPid, w.proc.pid)
	w.proc.out, w.proc.errw = w.out, w.err
	return w
}

// goMessage is what a warm interpreter becomes: p's command, in env.
func goMessage(p Proc, env []string) ([]byte, error) {
	py, err := ParsePython(p.Argv)
	if err != nil {
		return nil, err
	}
	dir := p.Dir
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	// title is the command line ps and pgrep -f show of the rank: the
	// user's command, as a cold start shows it.
	m := map[string]any{"argv": py.sysArgv(), "cwd": dir, "title": strings.Join(p.Argv, " ")}
	vars := map[string]string{}
	for _, kv := range env {
		if i := bytes.IndexByte([]byte(kv), '='); i > 0 {
			vars[kv[:i]] = kv[i+1:]
		}
	}
	m["env"] = vars
	switch {
	case py.Module != "":
		m["module"] = py.Module
	case py.Script != "":
		m["script"] = py.Script
	default:
		m["code"] = py.Code
	}
	for _, list := range [][]string{{dir, py.Script, py.Module, py.Code}, py.Args, env} {
		for _, s := range list {
			if !utf8.ValidString(s) {
				return nil, errors.New("not UTF-8")
			}
		}
	}
	return json.Marshal(m)
}

// procState is the state letter of /proc/PID/stat (R, S, D, T, t, Z, X),
// or 0 when the process is gone.
func procState(pid int) byte {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}
