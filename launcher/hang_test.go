package launcher_test

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/launcher"
)

// dumpSignal is the signal the progress child names for its stack:
// SIGRTMIN+6, as Python's signal.SIGRTMIN+6 is on glibc.
const dumpSignal = syscall.Signal(40)

// progressChild is a trainer as the Python side of hang detection makes
// it, in Go: it maps its progress page, names dumpSignal as the signal that
// writes its stack (it says "got dump"), takes STEPS steps and waits to be
// killed.
func progressChild() {
	fd, err := strconv.Atoi(os.Getenv(guard.EnvProgressFD))
	if err != nil {
		os.Exit(3)
	}
	mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		os.Exit(3)
	}
	_ = unix.Close(fd)
	word := func(off int) *atomic.Int64 { return (*atomic.Int64)(unsafe.Pointer(&mem[off])) }
	word(64).Store(int64(os.Getpid()))
	dumps := make(chan os.Signal, 1)
	signal.Notify(dumps, dumpSignal)
	word(56).Store(int64(os.Getpid()) | int64(dumpSignal)<<32)
	steps, _ := strconv.Atoi(os.Getenv("STEPS"))
	for i := 1; i <= steps; i++ {
		t := guard.MonoNow()
		word(24).Store(t)
		word(32).Store(t)
		word(16).Store(int64(i))
		time.Sleep(10 * time.Millisecond) // a step's work
	}
	for range dumps {
		fmt.Println("got dump")
	}
}

// The launcher carries the Watch of a start to the guard, hands on the
// ranks found hung and their progress, and StopStacks has each rank write
// its stack before it kills without a grace period.
func TestAHungRankIsReportedAndStoppedWithStacks(t *testing.T) {
	hung, progress := make(chan guard.Report, 8), make(chan guard.Report, 64)
	offer := func(ch chan guard.Report) func(guard.Report) {
		return func(r guard.Report) {
			select {
			case ch <- r:
			default:
			}
		}
	}
	out := &proctest.Buffer{}
	l, err := launcher.New(launcher.Config{
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     append(os.Environ(), "LAUNCHER_TEST_CHILD=progress", "STEPS=3", "GORACE=atexit_sleep_ms=0"),
		Stdout:  out, Stderr: out, Guard: guardCommand("auto"),
		OnHung: offer(hung), OnProgress: offer(progress),
	})
	require.NoError(t, err)
	require.NoError(t, l.SetDeadline(lease, time.Now().Add(time.Hour)))
	t.Cleanup(l.Close)

	p := procs(2)
	p.Watch = &guard.Watch{TimeoutNanos: int64(300 * time.Millisecond)}
	exits, err := l.Start(p, lease)
	require.NoError(t, err)

	got := map[int]guard.Report{}
	for len(got) < 2 {
		select {
		case r := <-hung:
			got[r.Rank] = r
		case <-time.After(30 * time.Second):
			t.Fatalf("not hung; output:\n%s", out.String())
		}
	}
	for _, rank := range []int{2, 3} { // global ranks
		assert.Equal(t, int64(3), got[rank].Generation)
		assert.Equal(t, int64(3), got[rank].Step)
		assert.Equal(t, int64(300*time.Millisecond), got[rank].TimeoutNanos)
	}
	select {
	case r := <-progress:
		require.Len(t, r.Progress, 2)
		assert.Equal(t, 2, r.Progress[0].Rank)
		assert.Equal(t, 3, r.Progress[1].Rank)
	default:
		t.Error("no progress before the hang")
	}

	require.NoError(t, l.StopStacks(t.Context()))
	e := wait(t, exits)
	assert.Equal(t, 128+int(syscall.SIGKILL), e.Code, "killed without a grace period")
	assert.Contains(t, out.String(), "[rank 2] got dump")
	assert.Contains(t, out.String(), "[rank 3] got dump")
}
