package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// parentOf reads a process's parent from /proc; 0 when it is gone.
func parentOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// childOf returns the ancestor of pid (or pid itself) whose parent is top,
// or 0 when pid does not descend from top.
func childOf(pid, top int) int {
	for pid > 1 {
		ppid := parentOf(pid)
		if ppid == top {
			return pid
		}
		pid = ppid
	}
	return 0
}

// tree returns root and every process that descends from it, root first.
func tree(root int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid := parentOf(pid); ppid > 0 {
			children[ppid] = append(children[ppid], pid)
		}
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// killAll sends SIGKILL to every process in pids, one after another with
// nothing between: a machine lost at once.
func killAll(pids []int) error {
	var first error
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH && first == nil {
			first = fmt.Errorf("kill %d: %w", pid, err)
		}
	}
	return first
}
