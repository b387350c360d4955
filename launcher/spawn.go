package launcher

import (
	"os/exec"
	"runtime"
)

// Spawn starts cmd from a goroutine locked to its OS thread until the
// process is reaped, and returns a channel that receives Wait's result.
// Linux sends a child its Pdeathsig when the thread that forked it exits,
// not the process: without the lock, the Go runtime retiring an idle thread
// would kill the child.
func Spawn(cmd *exec.Cmd) (<-chan error, error) {
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}
