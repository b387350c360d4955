package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// supervised is a process kept running as a kubelet keeps a container with
// restartPolicy Always: when it exits it is started again a second later,
// or after the delay a fault asked for.
type supervised struct {
	name   string
	binary string
	args   []string
	env    []string
	log    string // the process's output, appended across restarts

	mu        sync.Mutex
	cmd       *exec.Cmd
	downUntil time.Time // a fault keeps it down until then
	closing   bool
	restarts  int
	quit      chan struct{} // closed by stop
	exited    chan struct{} // closed when the supervisor ends
}

func supervise(name, binary, log string, env []string, args ...string) *supervised {
	s := &supervised{name: name, binary: binary, args: args, env: env, log: log, quit: make(chan struct{}), exited: make(chan struct{})}
	go s.loop()
	return s
}

func (s *supervised) loop() {
	defer close(s.exited)
	for {
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			return
		}
		out, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			s.mu.Unlock()
			fmt.Fprintf(os.Stderr, "chaos: %s: %v\n", s.name, err)
			return
		}
		cmd := exec.Command(s.binary, s.args...)
		cmd.Env = append(os.Environ(), s.env...)
		cmd.Stdout, cmd.Stderr = out, out
		err = cmd.Start()
		out.Close()
		if err != nil {
			s.mu.Unlock()
			fmt.Fprintf(os.Stderr, "chaos: start %s: %v\n", s.name, err)
			return
		}
		s.cmd = cmd
		s.mu.Unlock()

		_ = cmd.Wait()

		s.mu.Lock()
		s.cmd = nil
		wait := time.Until(s.downUntil)
		s.mu.Unlock()
		if wait < time.Second {
			wait = time.Second
		}
		select {
		case <-time.After(wait):
		case <-s.quit:
		}
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
	}
}

// pid is the running process, 0 if none.
func (s *supervised) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// kill sends SIGKILL and keeps the process down for at least d.
func (s *supervised) kill(d time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.downUntil = time.Now().Add(d)
	if s.cmd == nil {
		return 0
	}
	_ = s.cmd.Process.Kill()
	return s.cmd.Process.Pid
}

// stop ends the process with SIGTERM (SIGKILL after timeout) and stops
// supervising it.
func (s *supervised) stop(timeout time.Duration) {
	s.mu.Lock()
	if !s.closing {
		close(s.quit)
	}
	s.closing = true
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
	}
	s.mu.Unlock()
	select {
	case <-s.exited:
	case <-time.After(timeout):
		s.mu.Lock()
		if s.cmd != nil {
			_ = s.cmd.Process.Kill()
		}
		s.mu.Unlock()
		<-s.exited
	}
}

// coordinatorReplica is a `coordinator serve` and its health endpoint.
type coordinatorReplica struct {
	*supervised
	metrics string
}

// leads asks the replica's /healthz whether it leads.
func (c *coordinatorReplica) leads(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.metrics+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(body), "leader: true")
}
