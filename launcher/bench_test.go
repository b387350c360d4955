package launcher_test

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRestart times what the guard adds to a hot restart: one cycle
// stops a running process with SIGTERM, waits until it (and, under the
// guard, its whole tree) is gone, and starts the next one. "direct" is the
// floor: os/exec without a guard.
func BenchmarkRestart(b *testing.B) {
	env := append(os.Environ(), "LAUNCHER_TEST_CHILD=sleep", "GORACE=atexit_sleep_ms=0")
	b.Run("direct", func(b *testing.B) {
		start := func() *exec.Cmd {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = env
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			return cmd
		}
		cmd := start()
		time.Sleep(50 * time.Millisecond) // let it install its handler
		b.ResetTimer()
		for b.Loop() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			cmd = start()
			b.StopTimer()
			time.Sleep(50 * time.Millisecond)
			b.StartTimer()
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for _, mode := range cgroupModes {
		b.Run("guard cgroup "+mode, func(b *testing.B) {
			l, _ := newLauncher(b, mode, "sleep")
			if _, err := l.Start(procs(1), lease); err != nil {
				b.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			b.ResetTimer()
			for b.Loop() {
				if err := l.Stop(b.Context(), 5*time.Second); err != nil {
					b.Fatal(err)
				}
				if _, err := l.Start(procs(1), lease); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				time.Sleep(50 * time.Millisecond)
				b.StartTimer()
			}
		})
	}
}
