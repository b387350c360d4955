package guard

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// watchdogServing is a watchdog of generation 3 under lease 7, for trainer,
// answering commits on a socket of its own; its page is returned to move
// the deadline.
func watchdogServing(t *testing.T, trainer int) (*watchdog, *DeadlinePage, string) {
	t.Helper()
	page, err := NewDeadlinePage()
	require.NoError(t, err)
	t.Cleanup(page.Close)
	view, err := openDeadlineView(int(page.File().Fd()))
	require.NoError(t, err)
	t.Cleanup(view.close)
	name := watchSocketPrefix + "test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(trainer)
	l, err := listenUnix(name)
	require.NoError(t, err)
	w := &watchdog{view: view, pid: trainer, lease: 7, gen: 3, pidfd: -1}
	served := make(chan struct{})
	go func() {
		defer close(served)
		w.serveCommits(l)
	}()
	t.Cleanup(func() {
		_ = syscall.Shutdown(l.fd, syscall.SHUT_RDWR) // serveCommits returns and closes it
		<-served
	})
	return w, page, name
}

// askRaw sends one request line and returns the answer line.
func askRaw(t *testing.T, socket string, req CommitRequest) string {
	t.Helper()
	conn, err := dialUnix(socket, 10*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	line, err := encodeLine(req)
	require.NoError(t, err)
	_, _ = conn.Write(line)
	reply, err := bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(reply)
}

// A watchdog answers as the guard does, on the lease and deadline of its
// page at the moment it is asked, and renames only when it answers ok.
func TestAWatchdogAnswersCommitsWithTheGuardsRules(t *testing.T) {
	w, page, socket := watchdogServing(t, os.Getpid()) // this process is the trainer
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		set   func()
		gen   int64
		reply string
	}{
		{"current", func() { page.Set(7, MonoNow()+int64(time.Hour)) }, 3, "ok"},
		{"an old generation", func() { page.Set(7, MonoNow()+int64(time.Hour)) }, 2, "refused: generation 2 is over; this node runs generation 3"},
		{"the deadline passed, before the kill", func() { page.Set(7, MonoNow()) }, 3, "refused: the lease deadline has passed"},
		{"fenced", page.Fence, 3, "refused: this node was fenced out: its lease is lost"},
		{"another lease", func() { page.Set(8, MonoNow()+int64(time.Hour)) }, 3, "refused: this node was fenced out: its lease is lost"},
		{"its kill began", func() { page.Set(7, MonoNow()+int64(time.Hour)); w.killed.Store(true) }, 3, "refused: this node was fenced out: its lease is lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.set()
			src, dst := filepath.Join(dir, tc.name+".tmp"), filepath.Join(dir, tc.name)
			require.NoError(t, os.WriteFile(src, []byte("x"), 0o600))
			assert.Equal(t, tc.reply, askRaw(t, socket, CommitRequest{Op: "check", Generation: tc.gen}))
			assert.Equal(t, tc.reply, askRaw(t, socket, CommitRequest{Op: "rename", Generation: tc.gen, Src: src, Dst: dst}))
			_, err := os.Stat(dst)
			assert.Equal(t, tc.reply == "ok", err == nil, "renamed")
		})
	}
	assert.Equal(t, "error: guard: invalid message: generation 0: want >= 1", askRaw(t, socket, CommitRequest{Op: "check"}))
}

// Only what the watchdog's kill reaches may commit through it.
func TestAWatchdogAnswersItsTrainersTreeOnly(t *testing.T) {
	other := exec.Command("sleep", "60")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, other.Start())
	t.Cleanup(func() {
		_ = other.Process.Kill()
		_ = other.Wait()
	})
	_, page, socket := watchdogServing(t, other.Process.Pid)
	page.Set(7, MonoNow()+int64(time.Hour))
	assert.Equal(t, "error: not a process of this trainer", askRaw(t, socket, CommitRequest{Op: "check", Generation: 3}))
}

// Clients ask the watchdog first and the guard when it cannot be reached;
// the watchdog's answer stands.
func TestAFenceAsksTheWatchdogFirst(t *testing.T) {
	_, page, socket := watchdogServing(t, os.Getpid())
	page.Set(7, MonoNow()+int64(time.Hour))
	gone := watchSocketPrefix + "test-" + strconv.Itoa(os.Getpid()) + "-gone"
	nobody := watchSocketPrefix + "test-" + strconv.Itoa(os.Getpid()) + "-nobody"

	require.NoError(t, Fence{Watchdog: socket, Guard: nobody}.Check(3), "the watchdog answered")
	err := Fence{Watchdog: socket, Guard: socket}.Check(2)
	require.ErrorIs(t, err, ErrRefused)
	assert.EqualError(t, err, "commit refused: generation 2 is over; this node runs generation 3")
	require.NoError(t, Fence{Watchdog: gone, Guard: socket}.Check(3), "the guard answered for a watchdog that is not there")
	require.NoError(t, Fence{Watchdog: "", Guard: socket}.Check(3), "the guard answered without a watchdog")
	require.ErrorContains(t, Fence{Watchdog: gone, Guard: nobody}.Check(3), "reach the guard")

	dir := t.TempDir()
	src := filepath.Join(dir, "tmp")
	require.NoError(t, os.WriteFile(src, nil, 0o600))
	require.NoError(t, Fence{Watchdog: socket, Guard: "@unused"}.Commit(3, src, filepath.Join(dir, "ckpt")))
	assert.FileExists(t, filepath.Join(dir, "ckpt"))
}
