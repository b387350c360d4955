package guard

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"reflect"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// In-place trainers. A trainer that keeps its process across generations
// (the elastic module's in-place loop) registers on the guard's socket with
// OpInPlace, from the process the guard started itself, and keeps the
// connection. A stop then asks it to leave (TrainerLeave) instead of
// sending SIGTERM: it tears its process group down and says so (left). It
// is then parked: no longer the run's (no exit, no watchdog, out of the
// run's cgroup leaf, which the run's kill takes whole), holding no rank,
// and no child a clear waits for, like an idle warm interpreter. The
// node's next start hands it the generation's environment (TrainerRun)
// instead of starting its slot's process again.
//
// The fence is the guard's as for any process: a parked trainer only
// trains again through a start, which needs the node's current lease; a
// fence (deadline, kill, a new lease, the sidecar gone) kills it with
// everything else; one that was stopped is killed at once, since it may
// have been frozen across a fence; one that does not leave within the
// stop's grace period is killed as today, and its slot starts cold.

// OpInPlace is the request by which a trainer of generation Generation
// says it keeps its process across generations (generation 0: a started
// spare that finished its start-up). Answered "ok", the connection stays
// open for trainerMessage lines both ways.
const OpInPlace = "inplace"

// EnvSpare is "1" in a started spare's environment (OpSpare): it has no
// rank; elastic.run registers it for generation 0 and waits.
const EnvSpare = "ELASTIC_SPARE"

// The messages on an in-place trainer's connection, as the trainer's side
// (python/elastic/inplace.py) spells them too.
const (
	// TrainerLeave (guard → trainer): the generation stops; leave its
	// process group and say TrainerLeft.
	TrainerLeave = "leave"
	// TrainerLeft (trainer → guard): it holds no rank any more.
	TrainerLeft = "left"
	// TrainerRun (guard → trainer): train in generation Generation, with
	// the environment Env (the whole of it, as a cold start would get).
	TrainerRun = "run"
)

// trainerMessage is one line on an in-place trainer's connection.
type trainerMessage struct {
	Op         string   `json:"op"`
	Generation int64    `json:"generation,omitempty"`
	Env        []string `json:"env,omitempty"`
}

// trainerSaid is what the in-place trainer pid said; closed: its
// connection ended.
type trainerSaid struct {
	pid    int
	op     string
	closed bool
}

// inplaceLink is an in-place trainer's connection, owned by the loop.
type inplaceLink struct {
	conn    *os.File
	leaving bool // asked to leave, not yet parked
}

// trainerWriteTimeout bounds a write to a trainer: a message is a few
// kilobytes, which a socket buffer takes at once unless the trainer has
// not read for long.
const trainerWriteTimeout = 100 * time.Millisecond

// leaveWait is how long a stop for a hang gives in-place trainers to leave
// (such a stop has no grace period of its own).
const leaveWait = 5 * time.Second

// listenToTrainer reads an in-place trainer's lines until its connection
// ends, and hands each to the loop. The loop owns the connection and
// closes it.
func listenToTrainer(pid int, conn *os.File, said chan<- trainerSaid, done <-chan struct{}) {
	fd := int(conn.Fd())
	none := syscall.Timeval{}
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &none)
	write := syscall.NsecToTimeval(trainerWriteTimeout.Nanoseconds())
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &write)
	send := func(m trainerSaid) bool {
		select {
		case said <- m:
			return true
		case <-done:
			return false
		}
	}
	for {
		line, err := readLine(conn)
		if err != nil {
			send(trainerSaid{pid: pid, closed: true})
			return
		}
		var m trainerMessage
		if json.Unmarshal(line, &m) != nil {
			continue // not ours to act on
		}
		if !send(trainerSaid{pid: pid, op: m.Op}) {
			return
		}
	}
}

// acceptInPlace decides a trainer's OpInPlace: only a process the guard
// started for the current generation, itself (a child of it has no slot of
// its own), while the node may run it.
func (s *server) acceptInPlace(call commitCall) string {
	r := s.cur
	if call.req.Generation == 0 {
		return s.acceptSpare(call)
	}
	switch {
	case s.expired():
		return "refused: the node is fenced"
	case r == nil || r.gen != call.req.Generation || r.stopping:
		return fmt.Sprintf("refused: generation %d is not the one this node runs", call.req.Generation)
	}
	p, ok := r.procs[call.pid]
	switch {
	case !ok:
		return "refused: only the process the guard started (the trainer itself, not a child of it, nor a shell that runs it) keeps its process in place"
	case p.inplace != nil:
		return "refused: this process is registered in place already"
	}
	p.inplace = &inplaceLink{conn: call.conn}
	return "ok"
}

// acceptSpare decides a started spare's OpInPlace, once its start-up is
// done: it is parked, or, if a start made it a rank meanwhile, answered
// with that generation's run message after the "ok".
func (s *server) acceptSpare(call commitCall) string {
	if s.fenced || s.lease != 0 && MonoNow() >= s.killAt {
		return "refused: the node is fenced"
	}
	for _, p := range s.parked {
		if p.pid == call.pid && p.inplace == nil {
			p.inplace = &inplaceLink{conn: call.conn}
			s.out.send(Report{Event: EventParked, Seq: s.seq, Pid: p.pid, Slot: p.slot})
			return "ok"
		}
	}
	if s.cur != nil {
		if p, ok := s.cur.procs[call.pid]; ok && p.pendingRun != nil && p.inplace == nil {
			line, err := encodeLine(*p.pendingRun)
			if err != nil {
				return "refused: " + err.Error()
			}
			p.inplace, p.pendingRun = &inplaceLink{conn: call.conn}, nil
			return "ok\n" + string(line[:len(line)-1])
		}
	}
	return "refused: only a started spare of this guard registers without a generation"
}

// setSpares sets the started spares' commands; a spare still starting
// whose slot keeps none is killed.
func (s *server) setSpares(ps []Proc) {
	s.spares, s.spareLost = map[int]Proc{}, map[int]bool{}
	for _, p := range ps {
		if p.Path == "" {
			p.Path = p.Argv[0]
		}
		s.spares[p.Rank] = p
	}
	for slot, p := range s.parked {
		if _, ok := s.spares[slot]; !ok && p.inplace == nil {
			s.killParked(p)
		}
	}
}

// armSpares starts the started spares missing, at once: only while the
// node runs no generation (its trainers are parked, or it holds no rank),
// and not once it is fenced.
func (s *server) armSpares() {
	if len(s.spares) == 0 || !s.mayWarm() || s.cur != nil && len(s.cur.procs) > 0 {
		return
	}
	for slot, t := range s.spares {
		if s.parked[slot] != nil || s.spareLost[slot] {
			continue
		}
		if err := s.startSpare(slot, t); err != nil {
			s.spareLost[slot] = true
			s.coldWhy[slot] = fmt.Sprintf("its started spare could not be started: %v", err)
			fmt.Fprintf(s.cfg.Stderr, "[spare %d] guard: %v; this slot starts its trainer only when it is given a rank\n", slot, err)
		}
	}
}

// startSpare starts slot's command ahead, with no rank (EnvSpare), in the
// parked trainers' leaf: it runs its start-up, then registers for
// generation 0 and waits, parked.
func (s *server) startSpare(slot int, t Proc) error {
	var leaf *cgroup
	if s.cgRoot != nil {
		leaf, _ = s.parkedLeaf()
	}
	env := withEnv(s.procEnv(t), EnvSpare+"=1")
	var extra []uintptr
	page, err := newProgressPage()
	if err == nil {
		extra = []uintptr{uintptr(page.fd)}
		env = withEnv(env, EnvProgressFD+"="+strconv.Itoa(progressFDCold))
	}
	run := t
	run.Env, run.Prefix = env, "[spare "+strconv.Itoa(slot)+"] "
	pr, out, errw, err := s.spawn(run, leaf, extra, s.cfg.Stderr, s.cfg.Stderr, nil)
	if err != nil {
		page.close()
		return err
	}
	if page != nil {
		page.closeFD()
	}
	pr.page, pr.out, pr.errw, pr.slot, pr.cmd, pr.rank = page, out, errw, slot, t, -1
	s.parked[slot] = pr
	delete(s.coldWhy, slot)
	s.children = true
	return nil
}

// heard acts on what an in-place trainer said.
func (s *server) heard(m trainerSaid) {
	p, parked := s.inplaceProc(m.pid)
	if p == nil || p.inplace == nil {
		return
	}
	switch {
	case m.closed:
		_ = p.inplace.conn.Close()
		p.inplace = nil
		if parked {
			s.killParked(p) // nothing can hand it a generation now
		}
	case m.op == TrainerLeft && !parked && p.inplace.leaving:
		s.park(s.cur, p)
	}
}

// inplaceProc is the in-place trainer pid: the current run's, or parked.
func (s *server) inplaceProc(pid int) (p *proc, parked bool) {
	if s.cur != nil {
		if p, ok := s.cur.procs[pid]; ok {
			return p, false
		}
	}
	for _, p := range s.parked {
		if p.pid == pid {
			return p, true
		}
	}
	return nil, false
}

// askToLeave asks an in-place trainer to leave its generation; false when
// it is not one, or cannot be told (it is then stopped as any process).
func (s *server) askToLeave(p *proc) bool {
	if p.inplace == nil {
		return false
	}
	if p.inplace.leaving {
		return true
	}
	if !s.tellTrainer(p, trainerMessage{Op: TrainerLeave}) {
		return false
	}
	p.inplace.leaving = true
	return true
}

// tellTrainer writes m on p's connection; false when it did not go whole.
func (s *server) tellTrainer(p *proc, m trainerMessage) bool {
	line, err := encodeLine(m)
	if err != nil {
		return false
	}
	n, err := p.inplace.conn.Write(line)
	return err == nil && n == len(line)
}

// park makes p, which left its generation, a parked trainer of its slot.
func (s *server) park(r *run, p *proc) {
	delete(r.procs, p.pid)
	r.groups = slices.DeleteFunc(r.groups, func(pgid int) bool { return pgid == p.pid })
	s.finalProgress(r, p)
	r.drop(p)
	r.endWatchdog(p.pid)
	p.inplace.leaving = false
	if s.cg != nil {
		leaf, err := s.parkedLeaf()
		if err == nil {
			err = moveInto(leaf, p.pid)
		}
		if err != nil {
			// Not out of the run's leaf: it dies with the run.
			fmt.Fprintf(s.cfg.Stderr, "%s guard: rank %d cannot be parked (%v); it starts again\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), p.rank, err)
			s.coldWhy[p.slot] = fmt.Sprintf("rank %d left its generation but could not be parked: %v", p.rank, err)
			killProcessTree(p.pid)
			return
		}
	}
	if p.log != nil {
		p.log.finish(fmt.Sprintf("left generation %d in place; the process waits for the next", r.gen))
		p.log = nil
	}
	prefix := "[parked " + strconv.Itoa(p.slot) + "] "
	if p.out != nil {
		p.out.set(s.cfg.Stderr, prefix, nil)
		p.errw.set(s.cfg.Stderr, prefix, nil)
	}
	if old := s.parked[p.slot]; old != nil {
		s.killParked(old)
	}
	s.parked[p.slot] = p
	delete(s.coldWhy, p.slot)
	s.out.send(Report{Event: EventParked, Seq: s.seq, Pid: p.pid, Rank: p.rank, Generation: r.gen, Slot: p.slot})
}

// useParked makes the parked trainer of slot, if there is a healthy one
// running p's command, the process of p in generation gen: moved into the
// run's leaf, its output retargeted, its page the generation's, and sent
// the generation's environment. It returns nil to start the slot anew.
func (s *server) useParked(slot int, p Proc, env []string, gen int64) *proc {
	pr := s.parked[slot]
	if pr == nil {
		return nil
	}
	if pr.cmd.Path != p.Path || !reflect.DeepEqual(pr.cmd.Argv, p.Argv) || pr.cmd.Dir != p.Dir {
		s.killParked(pr)
		s.coldWhy[slot] = "the command changed; the waiting process ran the old one"
		return nil
	}
	if st := procState(pr.pid); st != 'R' && st != 'S' && st != 'D' {
		s.killParked(pr)
		s.coldWhy[slot] = "the waiting process was stopped, traced or gone, and was killed"
		return nil
	}
	if s.cg != nil && moveInto(s.cg, pr.pid) != nil {
		s.killParked(pr)
		s.coldWhy[slot] = "the waiting process could not be moved into the generation's cgroup"
		return nil
	}
	if pr.page != nil {
		// Mapped already: its variable, which names no descriptor in this
		// process any more, is not given again.
		pr.page.renew(gen)
	}
	stdout, stderr, log := s.outputOf(p)
	pr.rank, pr.log = p.Rank, log
	if pr.out != nil {
		pr.out.set(stdout, p.Prefix, log)
		pr.errw.set(stderr, p.Prefix, log)
	}
	msg := trainerMessage{Op: TrainerRun, Generation: gen, Env: env}
	switch {
	case pr.inplace == nil:
		// A started spare still in its start-up: it is the rank, and hears
		// so when it registers.
		pr.pendingRun = &msg
	case !s.tellTrainer(pr, msg):
		s.killParked(pr)
		s.coldWhy[slot] = "the waiting process could not be told its rank"
		return nil
	}
	delete(s.parked, slot)
	s.out.send(Report{Event: EventUnparked, Seq: s.seq, Pid: pr.pid, Slot: slot})
	return pr
}

// howItWouldBegin is how slot's parked trainer, if it is used, begins
// the next generation (Report.Began).
func (s *server) howItWouldBegin(slot int) string {
	pr := s.parked[slot]
	switch {
	case pr == nil || pr.rank >= 0:
		return BeganInPlace
	case pr.inplace == nil:
		return BeganSpareStarting
	}
	return BeganSpare
}

// coldStart is how slot begins when no parked trainer takes it: cold, and
// why, which is then forgotten.
func (s *server) coldStart(slot int) string {
	why := s.coldWhy[slot]
	delete(s.coldWhy, slot)
	if why == "" {
		why = "no process of this node was waiting in elastic.run (its last one ended with its generation, or its guard is new)"
	}
	return BeganCold + ": " + why
}

// killParked kills a parked trainer and what runs below it. It is
// forgotten at once: from now on it is a child like any other, which a
// clear waits for until it is reaped.
func (s *server) killParked(p *proc) {
	s.forgetParked(p, "killed while parked")
	killProcessTree(p.pid)
	s.children = true
}

// killAllParked kills every parked trainer: the node is fenced.
func (s *server) killAllParked() {
	for _, p := range s.parked {
		s.killParked(p)
	}
}

// parkedReaped forgets a parked trainer that exited by itself. A started
// spare that exited before it registered failed its start-up (or never
// reached elastic.run): its slot gets no other.
func (s *server) parkedReaped(pid int, ws syscall.WaitStatus) {
	for _, p := range s.parked {
		if p.pid != pid {
			continue
		}
		if p.inplace == nil && p.rank < 0 {
			rep := Report{Event: EventSpareLost, Seq: s.seq, Pid: pid, Slot: p.slot, Code: ws.ExitStatus()}
			if ws.Signaled() {
				rep.Signal = int(ws.Signal())
				rep.Code = 128 + rep.Signal
			}
			s.spareLost[p.slot] = true
			s.coldWhy[p.slot] = fmt.Sprintf("its started spare exited with code %d before it reached elastic.run", rep.Code)
			fmt.Fprintf(s.cfg.Stderr, "[spare %d] guard: the started spare exited with code %d before it reached elastic.run; this slot starts its trainer only when it is given a rank\n", p.slot, rep.Code)
			s.forgetParked(p, "exited before it reached elastic.run")
			s.out.send(rep)
			return
		}
		s.forgetParked(p, "exited while parked")
		return
	}
}

// forgetParked drops p from the parked trainers, with its page, its
// connection and its log file, which says how it ended.
func (s *server) forgetParked(p *proc, how string) {
	if s.parked[p.slot] == p {
		delete(s.parked, p.slot)
		if s.coldWhy[p.slot] == "" {
			s.coldWhy[p.slot] = "its waiting process " + how
		}
		if p.inplace != nil {
			s.out.send(Report{Event: EventUnparked, Seq: s.seq, Pid: p.pid, Slot: p.slot})
		}
	}
	p.page.close()
	p.page = nil
	if p.inplace != nil {
		_ = p.inplace.conn.Close()
		p.inplace = nil
	}
	if p.log != nil {
		p.log.finish(how)
		p.log = nil
	}
}

// slotOf is the slot of the parked trainer pid, -1 for none.
func (s *server) slotOf(pid int) int {
	for slot, p := range s.parked {
		if p.pid == pid {
			return slot
		}
	}
	return -1
}

// isIdle reports whether pid holds no rank: an idle warm interpreter or a
// parked trainer, which a stop leaves alone and a clear does not wait for.
func (s *server) isIdle(pid int) bool { return s.isIdleWarm(pid) || s.slotOf(pid) >= 0 }

// parkedSignalled kills a parked trainer that was stopped or continued:
// it may have been frozen across a fence.
func (s *server) parkedSignalled(pid int) {
	if slot := s.slotOf(pid); slot >= 0 {
		s.killParked(s.parked[slot])
	}
}

// parkedLeaf is the cgroup leaf of the parked trainers, made when first
// needed.
func (s *server) parkedLeaf() (*cgroup, error) {
	if s.parkCg != nil {
		return s.parkCg, nil
	}
	if s.cgRoot == nil {
		return nil, fmt.Errorf("no cgroup")
	}
	cg, err := s.cgRoot.newLeaf("parked-" + strconv.Itoa(s.cgRoot.runs))
	if err != nil {
		return nil, err
	}
	s.parkCg = cg
	return cg, nil
}

// moveInto moves pid and every process below it into the leaf cg.
func moveInto(cg *cgroup, pid int) error {
	for _, p := range append([]int{pid}, Descendants(pid)...) {
		if err := os.WriteFile(path.Join(cg.path, "cgroup.procs"), []byte(strconv.Itoa(p)), 0); err != nil && p == pid {
			return err
		}
	}
	return nil
}

// drop forgets the rank of a process that left the run alive: its page
// stays mapped, for its next generation.
func (r *run) drop(p *proc) {
	for i, rw := range r.ranks {
		if rw.p == p {
			r.ranks = append(r.ranks[:i], r.ranks[i+1:]...)
			return
		}
	}
}
