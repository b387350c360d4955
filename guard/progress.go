package guard

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The progress page is how a training process tells its guard that it
// lives: a 4096-byte memfd the guard creates for each process it starts,
// maps itself, and hands to the process, which maps it too (the Python side:
// sitecustomize, or warm.py at its go message). Little-endian 64-bit words:
//
//	 0 magic "ELPROG1\0"                                       guard
//	 8 generation                                              guard
//	16 steps: progress events so far                           trainer
//	24 last_step_ns: CLOCK_MONOTONIC of the last of them       trainer
//	32 last_activity_ns: of the last sign of life              trainer
//	40 user_step: the step the trainer last named; 0 for none  trainer
//	48 quiet_until_ns: the end of a declared quiet phase       trainer
//	56 dump: pid (low 32 bits) and signal (high 32 bits) that
//	   write the process's Python stack                        trainer
//	64 attached pid: the process that mapped the page          trainer
//	72 first_step_ns: CLOCK_MONOTONIC of the first event        trainer
//	80 first_user_step: the first step the trainer named        trainer
//	88 first_user_ns: CLOCK_MONOTONIC of the event naming it    trainer
//	96 halt: non-zero once the generation's stop has the
//	   process write its stack: it makes no more progress       guard
//
// The guard writes magic and generation before the process runs its
// command, halt at a stop (dump), and reads the others with atomic loads. Each process has a page of its own,
// unmapped when it is reaped: a process of an old generation writes into a
// page nobody reads.

// EnvProgressFD names, in a training process's environment, the descriptor
// of its progress page.
const EnvProgressFD = "ELASTIC_PROGRESS_FD"

// Descriptors of the progress page: a process started cold gets it as 3;
// a warm interpreter as 5, after its go and ready pipes.
const (
	progressFDCold = 3
	progressFDWarm = 5
)

// progressMagic starts every page.
const progressMagic = "ELPROG1\x00"

// Offsets of the page's words.
const (
	offMagic        = 0
	offGeneration   = 8
	offSteps        = 16
	offLastStep     = 24
	offLastActivity = 32
	offUserStep     = 40
	offQuietUntil   = 48
	offDump         = 56
	offAttached     = 64
	offFirstStep    = 72
	offFirstUser    = 80
	offFirstUserAt  = 88
	offHalt         = 96
)

// progressPage is the guard's mapping of one process's page, and until the
// process has it, its descriptor.
type progressPage struct {
	fd  int // -1 once closed
	mem []byte
}

// newProgressPage creates a page with its magic written. Its descriptor is
// close-on-exec: it reaches a process only as one of its Files.
func newProgressPage() (*progressPage, error) {
	fd, err := unix.MemfdCreate("elastic-progress", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("progress page: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, pageSize); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("progress page: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("progress page: mmap: %w", err)
	}
	copy(mem[offMagic:], progressMagic)
	return &progressPage{fd: fd, mem: mem}, nil
}

func (p *progressPage) word(off int) *atomic.Int64 {
	return (*atomic.Int64)(unsafe.Pointer(&p.mem[off]))
}

// setGeneration writes the generation the process runs.
func (p *progressPage) setGeneration(gen int64) { p.word(offGeneration).Store(gen) }

// halt tells the process that its generation is stopping: the thread that
// reaches its next progress event or sign of life waits there for the
// kill.
func (p *progressPage) halt() { p.word(offHalt).Store(1) }

// renew makes the page of a parked trainer that trains again in place
// generation gen's, as a new process's would be: no step counted, none
// named, no halt. The trainer is parked meanwhile: it writes nothing.
func (p *progressPage) renew(gen int64) {
	for _, off := range []int{offSteps, offLastStep, offLastActivity, offUserStep, offFirstStep, offFirstUser, offFirstUserAt, offHalt} {
		p.word(off).Store(0)
	}
	p.setGeneration(gen)
}

// closeFD closes the guard's descriptor once the process has its own; the
// mapping stays.
func (p *progressPage) closeFD() {
	if p.fd >= 0 {
		_ = unix.Close(p.fd)
		p.fd = -1
	}
}

// close unmaps the page: its process was reaped. Nil is no page.
func (p *progressPage) close() {
	if p == nil {
		return
	}
	p.closeFD()
	if p.mem != nil {
		_ = unix.Munmap(p.mem)
		p.mem = nil
	}
}

// progress is what the trainer wrote on its page.
type progress struct {
	Steps, LastStep, LastActivity, UserStep, QuietUntil int64
	// DumpPid and DumpSignal write the process's Python stack; 0 for none.
	DumpPid, DumpSignal int
	// Attached is the process that mapped the page; 0 for none.
	Attached int
	// FirstStep is when the first event was, FirstUser the first step
	// named, at FirstUserAt; 0 for none (a trainer of an older module
	// writes none of them).
	FirstStep, FirstUser, FirstUserAt int64
}

// load reads the trainer's words. The trainer writes steps, last_step and
// last_activity together but not atomically as one: they are read again
// while steps changes under the reader, a few times at most.
func (p *progressPage) load() progress {
	var pr progress
	// The phase's word before the sign of life: the trainer writes the
	// sign of life that ends a phase before it clears the phase.
	pr.QuietUntil = p.word(offQuietUntil).Load()
	for range 3 {
		pr.Steps = p.word(offSteps).Load()
		pr.LastStep = p.word(offLastStep).Load()
		pr.LastActivity = p.word(offLastActivity).Load()
		pr.UserStep = p.word(offUserStep).Load()
		if p.word(offSteps).Load() == pr.Steps {
			break
		}
	}
	dump := uint64(p.word(offDump).Load())
	pr.DumpPid, pr.DumpSignal = int(uint32(dump)), int(dump>>32)
	pr.Attached = int(uint32(p.word(offAttached).Load()))
	// The first user step is written after its time: read in that order.
	pr.FirstStep = p.word(offFirstStep).Load()
	if pr.FirstUser = p.word(offFirstUser).Load(); pr.FirstUser > 0 {
		pr.FirstUserAt = p.word(offFirstUserAt).Load()
	}
	return pr
}

// state is what the hang decisions take of it.
func (pr progress) state() pageState {
	return pageState{Steps: pr.Steps, LastActivity: pr.LastActivity, QuietUntil: pr.QuietUntil}
}

// step is the step the rank names: the one it last named, else its count
// (counted).
func (pr progress) step() (step int64, counted bool) {
	if pr.UserStep > 0 {
		return pr.UserStep, false
	}
	return max(pr.Steps, 0), true
}
