package guard

import "time"

// stepMarks are when a rank of the run first and last stepped, on
// CLOCK_MONOTONIC, and the first step it named: the coordinator accounts
// a job's time by them (the end of a restart, the job's last progress
// before a stop, the steps trained again).
type stepMarks struct {
	first, last  int64
	firstNamed   int64
	firstNamedAt int64
}

// stepped notes a sample of the page that shows new steps. The trainer
// writes when its first step was, and its first step named; a trainer
// that does not (an older module) is taken at the sample's last step.
func (m *stepMarks) stepped(pr progress) {
	if m.first == 0 {
		m.first = pr.LastStep
		if pr.FirstStep > 0 && pr.FirstStep <= pr.LastStep {
			m.first = pr.FirstStep
		}
	}
	if m.firstNamed == 0 {
		switch {
		case pr.FirstUser > 0 && pr.FirstUserAt > 0:
			m.firstNamed, m.firstNamedAt = pr.FirstUser, pr.FirstUserAt
		case pr.UserStep > 0:
			m.firstNamed, m.firstNamedAt = pr.UserStep, pr.LastStep
		}
	}
	m.last = pr.LastStep
}

// put writes the marks into rp, converted to the wall clock: now is
// CLOCK_MONOTONIC when the wall clock read wall.
func (m *stepMarks) put(rp *RankProgress, now, wall int64) {
	toWall := func(mono int64) int64 {
		if mono <= 0 {
			return 0
		}
		return wall - (now - mono)
	}
	rp.FirstStepUnixNanos, rp.LastStepUnixNanos = toWall(m.first), toWall(m.last)
	if m.firstNamed > 0 {
		rp.FirstNamed, rp.FirstNamedUnixNanos = m.firstNamed, toWall(m.firstNamedAt)
	}
}

// finalProgress reads the page of a process of the run being reaped one
// last time, and once the run's last process is reaped reports how far
// each of its ranks that stepped got (EventProgress, Final): its last
// step may be later than the last progress report says.
func (s *server) finalProgress(r *run, p *proc) {
	for _, rw := range r.ranks {
		if rw.p != p {
			continue
		}
		if p.page != nil {
			if pr := p.page.load(); pr.Steps > rw.steps {
				rw.marks.stepped(pr)
				rw.steps, rw.lastStep, rw.last = pr.Steps, pr.LastStep, pr
			}
		}
		if rw.steps > 0 {
			r.finals = append(r.finals, rw.progress(MonoNow(), time.Now().UnixNano()))
		}
	}
	if len(r.procs) > 0 || len(r.finals) == 0 {
		return
	}
	finals := r.finals
	r.finals = nil
	if len(finals) > MaxProcs {
		finals = finals[:MaxProcs]
	}
	s.out.send(Report{Event: EventProgress, Seq: s.seq, Generation: r.gen, Progress: finals, Final: true})
}
