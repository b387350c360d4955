package guard

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// The commit socket is written on raw system calls rather than package net,
// whose initialisation (and its dependencies') would come before the
// guard's in a binary that links everything; see cmd/coordinator's
// fastpath.

// listener is a listening unix stream socket.
type listener struct{ fd int }

// listenUnix listens on name; a leading '@' makes it abstract.
func listenUnix(name string) (*listener, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if err := syscall.Bind(fd, sockaddr(name)); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", name, err)
	}
	if err := syscall.Listen(fd, 128); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("listen on %s: %w", name, err)
	}
	return &listener{fd: fd}, nil
}

// accept waits for a connection and returns it with its peer's
// credentials. Each connection gets 30 s to say and hear what it has to.
func (l *listener) accept() (*os.File, *syscall.Ucred, error) {
	for {
		nfd, _, err := syscall.Accept4(l.fd, syscall.SOCK_CLOEXEC)
		if err == syscall.EINTR || err == syscall.ECONNABORTED {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		cred, err := syscall.GetsockoptUcred(nfd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		if err != nil {
			cred = nil
		}
		setTimeouts(nfd, 30*time.Second)
		return os.NewFile(uintptr(nfd), "commit"), cred, nil
	}
}

// Close stops accepting; a blocked accept returns.
func (l *listener) Close() error {
	_ = syscall.Shutdown(l.fd, syscall.SHUT_RDWR)
	return syscall.Close(l.fd)
}

// dialUnix connects to name; a leading '@' makes it abstract.
func dialUnix(name string, timeout time.Duration) (*os.File, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.Connect(fd, sockaddr(name)); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	setTimeouts(fd, timeout)
	return os.NewFile(uintptr(fd), name), nil
}

func sockaddr(name string) *syscall.SockaddrUnix {
	if len(name) > 0 && name[0] == '@' {
		name = "\x00" + name[1:]
	}
	return &syscall.SockaddrUnix{Name: name}
}

func setTimeouts(fd int, d time.Duration) {
	tv := syscall.NsecToTimeval(d.Nanoseconds())
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv)
}
