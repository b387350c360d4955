package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/elastictraining/coordinator/coordinator"
	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

func main() {
	full := "bin/coordinator"
	slim := "bin/coordinator-sidecar"
	out := ""
	for i := 1; i+1 < len(os.Args); i += 2 {
		switch os.Args[i] {
		case "-coordinator":
			full = os.Args[i+1]
		case "-sidecar":
			slim = os.Args[i+1]
		case "-out":
			out = os.Args[i+1]
		}
	}
	var rows []string
	for _, bin := range []string{full, slim} {
		row, err := measure(full, bin)
		if err != nil {
			fmt.Fprintf(os.Stderr, "footprint: %s: %v\n", bin, err)
			os.Exit(1)
		}
		rows = append(rows, row)
		fmt.Fprintln(os.Stderr, row)
	}
	text := "# Sidecar footprint\n\n" +
		"`make bench-footprint` on " + time.Now().UTC().Format("2006-01-02") + ": one node of a job of np 1 whose trainer is `sleep`, on a `coordinator etcd`; " +
		"resident memory (VmRSS) of the sidecar process and of its guard read 5 s after the node runs, and the sidecar's peak (VmHWM).\n\n" +
		"| binary | size | sidecar RSS | sidecar peak RSS | guard RSS |\n|---|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n"
	fmt.Print(text)
	if out != "" {
		if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "footprint:", err)
			os.Exit(1)
		}
	}
}

func measure(etcdBinary, binary string) (string, error) {
	dir, err := os.MkdirTemp("", "bench-footprint-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	client, peer := freePort(), freePort()
	endpoint := "http://127.0.0.1:" + client
	etcd := exec.Command(etcdBinary, "etcd", "--data-dir", filepath.Join(dir, "etcd"), "--listen-client-urls", endpoint,
		"--listen-peer-urls", "http://127.0.0.1:"+peer)
	if err := etcd.Start(); err != nil {
		return "", err
	}
	defer func() { _ = etcd.Process.Signal(syscall.SIGTERM); _ = etcd.Wait() }()
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: []string{endpoint}})
	if err != nil {
		return "", err
	}
	defer cli.Close()
	// A coordinator of its own, in this process: the node needs one to run.
	c, err := coordinator.New(coordinator.Config{Client: cli, Keys: membership.DefaultKeys()})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()

	sidecar := exec.Command(binary, "sidecar", "--etcd-endpoints", endpoint, "--job", "footprint", "--np", "1", "--node-id", "n0",
		"--host", "127.0.0.1", "--port", freePort(), "--master-port", freePort(), "--log-level", "warn", "--", "sleep", "600")
	sidecar.Stderr = os.Stderr // warnings and errors only: why a node does not run
	if err := sidecar.Start(); err != nil {
		return "", err
	}
	defer func() { _ = sidecar.Process.Signal(syscall.SIGTERM); _ = sidecar.Wait() }()
	status := jobclient.New(cli, membership.DefaultKeys())
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := status.Status(ctx, "footprint")
		if err == nil && s.Phase == membership.JobRunning {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the node did not run within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(5 * time.Second)
	rss, peak := memory(sidecar.Process.Pid)
	// The guard is the sidecar's child that is not the trainer.
	guardRSS := int64(0)
	for _, child := range children(sidecar.Process.Pid) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child)); strings.TrimSpace(string(comm)) == "sleep" {
			continue
		}
		if r, _ := memory(child); r > guardRSS {
			guardRSS = r
		}
	}
	info, err := os.Stat(binary)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("| `%s` | %.1f MB | %.1f MB | %.1f MB | %.1f MB |", filepath.Base(binary), float64(info.Size())/1e6,
		float64(rss)/1e6, float64(peak)/1e6, float64(guardRSS)/1e6), nil
}

// memory is a process's resident and peak resident memory in bytes.
func memory(pid int) (rss, peak int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	return rss, peak
}

// children are the direct children of pid, found by their parent in /proc.
func children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		stat := string(b)
		fields := strings.Fields(stat[strings.LastIndexByte(stat, ')')+2:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

func freePort() string {
	p, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		panic(err)
	}
	return strconv.Itoa(p)
}
