package guard

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A stop because of a hang writes each rank's Python stack before it kills:
// the trainer registered faulthandler on a signal and wrote the signal and
// its pid in word 56 of its page. The guard sends that signal, continues
// the process if it was stopped, and kills after dumpWait, on a timer of
// the loop: the loop never sleeps.
//
// Meanwhile the ranks run: a stopped rank that is continued finishes what
// its peers waited for in their collectives, and every rank would go on
// training for the whole wait, a step or more of a generation that is over
// (whose saves its sidecar refuses). So with the signal the guard halts
// the page (word 96): the trainer's module parks the thread that reaches
// its next progress event or sign of life (an optimizer step's end, a
// backward's start, a save, a beat) until the kill. A rank parked at its
// backward's start never joins that backward's collectives, so its peers
// cannot finish that step either. Only that thread waits: the stack is
// written whichever thread takes the signal, before the halt or after.

// dumpWait is how long the processes get to write their stacks before they
// are killed.
const dumpWait = 200 * time.Millisecond

// maxSignal is the highest signal number (SIGRTMAX on Linux).
const maxSignal = 64

// dump has the rank's process write its Python stack: the process named in
// word 56 of its page, when it is the rank's process or runs below it and
// is alive, is sent the signal named there, and continued if it was
// stopped; the page is halted after the signal, before the continuation.
// It reports whether the signal was sent.
func (rw *rankWatch) dump() bool {
	if rw.p.page == nil {
		return false
	}
	// However this ends; after the signal when one is sent, so that a
	// rank that takes it at once shows where it was, not where it parked.
	defer rw.p.page.halt()
	pr := rw.p.page.load()
	pid, sig := pr.DumpPid, pr.DumpSignal
	if pid <= 1 || sig < 1 || sig > maxSignal {
		return false
	}
	// Opened before the checks, so that the signal reaches the process
	// checked and not one that took its pid since.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err == nil {
		defer unix.Close(pidfd)
	} else {
		pidfd = -1 // Linux before 5.3
	}
	if pid != rw.p.pid && !IsDescendant(pid, rw.p.pid) {
		return false
	}
	st, ok := ReadProc(pid)
	if !ok || !st.Running() {
		return false
	}
	send := func(sig syscall.Signal) error {
		if pidfd >= 0 {
			return unix.PidfdSendSignal(pidfd, sig, nil, 0)
		}
		return syscall.Kill(pid, sig)
	}
	if send(syscall.Signal(sig)) != nil {
		return false
	}
	// Before it is continued: a stopped rank never steps again.
	rw.p.page.halt()
	if st.State == 'T' {
		_ = send(syscall.SIGCONT) // it handles the signal once it runs
	}
	return true
}

// stopWithStacks is OpStop with Stacks: every rank writes its stack, and
// after dumpWait everything is killed, without a grace period. An in-place
// trainer that is not stopped is asked to leave instead, and gets
// leaveWait to do so; one reported hung gets hungLeaveWait.
func (s *server) stopWithStacks() {
	if s.cur != nil && s.leaveInPlace(s.cur) {
		return
	}
	sent := false
	if s.cur != nil {
		for _, rw := range s.cur.ranks {
			sent = rw.dump() || sent
		}
	}
	if !sent {
		s.killRun()
		return
	}
	s.dumpAll = true
	s.dumpTimer.Reset(dumpWait)
}

// hungLeaveWait is how long an in-place rank reported hung, and not
// stopped, gets to leave before it writes its stack and is killed.
//
// The hang watch cannot tell a rank that hangs from one that waits in a
// collective for a peer: when a peer's node is killed or frozen, every
// rank waits until that node's lease ends, which may be longer than the
// hang timeout, and every guard reports its own ranks hung. A rank that
// waits is asked to leave, which breaks its group's connections: its
// collective raises and it leaves within milliseconds, keeping its
// process. A rank that truly hangs (deadlocked, spinning) never answers,
// and pays this wait once before its stack is taken. A stopped rank is not
// asked: it writes its stack and is killed at once.
const hungLeaveWait = time.Second

// leaveInPlace is a stop for a hang where some trainers keep their
// process: those leave; the others write their stacks and are killed. It
// returns false, having done nothing, when no trainer of r is in place.
func (s *server) leaveInPlace(r *run) bool {
	leaving, hungAsked := false, false
	for _, rw := range r.ranks {
		if !rw.stopped() && s.askToLeave(rw.p) {
			leaving = true
			hungAsked = hungAsked || rw.hung
		}
	}
	if !leaving {
		return false
	}
	for _, rw := range r.ranks {
		switch {
		case rw.p.inplace != nil && rw.p.inplace.leaving:
		case rw.dump():
			s.dumpKill = append(s.dumpKill, rw.p.pid)
		default:
			s.killRank(rw.p.pid)
		}
	}
	if len(s.dumpKill) > 0 {
		s.dumpTimer.Reset(dumpWait)
	}
	if hungAsked {
		s.hungTimer.Reset(hungLeaveWait)
	}
	s.graceTimer.Reset(leaveWait)
	return true
}

// hungDidNotLeave ends hungLeaveWait: each rank reported hung that was
// asked to leave and has not writes its stack and is killed.
func (s *server) hungDidNotLeave() {
	if s.cur == nil {
		return
	}
	for _, rw := range s.cur.ranks {
		if !rw.hung || rw.p.inplace == nil || !rw.p.inplace.leaving {
			continue
		}
		if rw.dump() {
			s.dumpKill = append(s.dumpKill, rw.p.pid)
		} else {
			s.killRank(rw.p.pid)
		}
	}
	if len(s.dumpKill) > 0 {
		s.dumpTimer.Reset(dumpWait)
	}
}

// stopGracefully is OpStop with a grace period. In a watched run, a rank
// that is blocked (blocked), or stopped, writes its stack and is killed at
// once: SIGTERM would not reach its Python code, and its grace period would
// only delay the restart. The others get SIGTERM, and the grace period
// before they are killed.
func (s *server) stopGracefully(grace time.Duration) {
	r := s.cur
	skip := map[int]bool{}
	if r.watch != nil {
		now := MonoNow()
		for _, rw := range r.ranks {
			s.sample(r, rw, now)
			// An in-place trainer blocked in a collective leaves all the same:
			// it breaks its process group's connections itself.
			if !rw.stopped() && (rw.p.inplace != nil || rw.p.page == nil || !blocked(now, r.startedAt, rw.pageState(), rw.longest)) {
				continue
			}
			skip[rw.p.pid] = true
			if rw.dump() {
				s.dumpKill = append(s.dumpKill, rw.p.pid)
			} else {
				s.killRank(rw.p.pid)
			}
		}
	}
	if len(skip) > 0 && len(skip) == len(r.ranks) {
		// Every rank is blocked: nothing is left to wait for.
		s.dumpKill, s.dumpAll = nil, true
		s.dumpTimer.Reset(dumpWait)
		return
	}
	for _, pgid := range r.groups {
		if skip[pgid] {
			continue
		}
		if p := r.procs[pgid]; p != nil && s.askToLeave(p) {
			continue
		}
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
	}
	if len(s.dumpKill) > 0 {
		s.dumpTimer.Reset(dumpWait)
	}
	s.graceTimer.Reset(grace)
}

// dumpsWritten kills what wrote its stack: the run, or the blocked ranks
// of a graceful stop.
func (s *server) dumpsWritten() {
	pids, all := s.dumpKill, s.dumpAll
	s.dumpKill, s.dumpAll = nil, false
	if all {
		s.killRun()
		return
	}
	for _, pid := range pids {
		s.killRank(pid)
	}
}

// stopDumps forgets the kill that waits for stacks: the run is killed, or
// gone.
func (s *server) stopDumps() {
	s.dumpTimer.Stop()
	s.hungTimer.Stop()
	s.dumpKill, s.dumpAll = nil, false
}

// killRank kills the process of a rank of the current run and its tree,
// if it was not reaped yet (so that its pid, and its process group's, are
// still its own). A process it forks meanwhile is left to the run's kill
// at the end of the grace period.
func (s *server) killRank(pid int) {
	if s.cur == nil {
		return
	}
	if _, running := s.cur.procs[pid]; !running {
		return
	}
	killProcessTree(pid)
}
