package guard

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DeadlinePage is the lease deadline in shared memory: a memfd that the
// sidecar's launcher writes at every renewal and the fence watchdogs of the
// training processes read. It carries renewals past a frozen guard: the
// guard only hands the descriptor on, so a renewal that the sidecar made
// reaches the watchdogs whatever state the guard is in, and a sidecar that
// is frozen makes none.
//
// The page holds the lease, its deadline (CLOCK_MONOTONIC nanoseconds,
// MonoNow's clock; 0 when the node is fenced) and a change counter. A
// reader loads the deadline, then the lease. The writer never lets a
// reader pair a new deadline with an old lease: a new lease is written as
// deadline 0, the lease, then the deadline. After each change the writer
// bumps the counter and wakes the readers waiting on it (a futex on the
// shared page), so that a deadline moved earlier, or a fence, is seen at
// once rather than when the old deadline comes.
type DeadlinePage struct {
	file *os.File
	mem  []byte
}

// pageSize is the memfd's size: one page, of which 20 bytes are used.
const pageSize = 4096

// Futex operations (linux/futex.h), on a shared mapping: not private.
const (
	futexWake       = 1
	futexWaitBitset = 9
	futexBitsetAll  = 0xffffffff
)

// NewDeadlinePage creates the page, fenced (deadline 0). Its file is the
// descriptor to pass to the guard.
func NewDeadlinePage() (*DeadlinePage, error) {
	fd, err := unix.MemfdCreate("elastic-deadline", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("deadline page: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, pageSize); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("deadline page: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("deadline page: mmap: %w", err)
	}
	// Nobody else may write it, nor resize it under a reader's mapping.
	// FUTURE_WRITE (Linux 5.1) leaves this mapping writable; without it
	// the page is still private to the processes it is handed to.
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_FUTURE_WRITE)
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
	return &DeadlinePage{file: os.NewFile(uintptr(fd), "elastic-deadline"), mem: mem}, nil
}

// File is the page's descriptor, for the guard.
func (p *DeadlinePage) File() *os.File { return p.file }

// Set records that the processes of lease must be dead at killAt
// (CLOCK_MONOTONIC nanoseconds).
func (p *DeadlinePage) Set(lease, killAt int64) {
	leaseWord, deadline, _ := words(p.mem)
	if leaseWord.Load() != lease {
		deadline.Store(0)
		leaseWord.Store(lease)
	}
	deadline.Store(killAt)
	p.changed()
}

// Fence records that no process may run: the watchdogs kill what they
// watch.
func (p *DeadlinePage) Fence() {
	_, deadline, _ := words(p.mem)
	deadline.Store(0)
	p.changed()
}

// changed bumps the counter and wakes every watchdog waiting on it.
func (p *DeadlinePage) changed() {
	_, _, seq := words(p.mem)
	seq.Add(1)
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(seq)), futexWake, uintptr(math.MaxInt32), 0, 0, 0)
}

// Close unmaps the page and closes its descriptor; the processes it was
// handed to keep their own.
func (p *DeadlinePage) Close() {
	_ = unix.Munmap(p.mem)
	_ = p.file.Close()
}

// deadlineView is a read-only mapping of the page.
type deadlineView struct{ mem []byte }

// openDeadlineView maps the page behind fd read-only.
func openDeadlineView(fd int) (*deadlineView, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("deadline page: %w", err)
	}
	if st.Size < pageSize {
		return nil, errors.New("deadline page: descriptor is not a deadline page")
	}
	mem, err := unix.Mmap(fd, 0, pageSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("deadline page: mmap: %w", err)
	}
	return &deadlineView{mem: mem}, nil
}

// close unmaps the page.
func (v *deadlineView) close() { _ = unix.Munmap(v.mem) }

// load returns the lease and its deadline, the deadline read first, and
// the change counter before them, for wait.
func (v *deadlineView) load() (lease, killAt int64, seq uint32) {
	leaseWord, deadline, seqWord := words(v.mem)
	seq = seqWord.Load()
	killAt = deadline.Load()
	return leaseWord.Load(), killAt, seq
}

// wait sleeps until the page changes after seq was read, or until the
// CLOCK_MONOTONIC time until (an absolute time, so that a sleep cut by a
// stop and resumed by SIGCONT ends when it would have), or a signal.
func (v *deadlineView) wait(seq uint32, until int64) {
	_, _, seqWord := words(v.mem)
	ts := unix.NsecToTimespec(max(until, 1))
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(seqWord)), futexWaitBitset, uintptr(seq),
		uintptr(unsafe.Pointer(&ts)), 0, futexBitsetAll)
}

// words are the page's lease, deadline and change counter.
func words(mem []byte) (lease, deadline *atomic.Int64, seq *atomic.Uint32) {
	return (*atomic.Int64)(unsafe.Pointer(&mem[0])), (*atomic.Int64)(unsafe.Pointer(&mem[8])),
		(*atomic.Uint32)(unsafe.Pointer(&mem[16]))
}
