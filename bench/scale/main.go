package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// job is the benchmark's job id.
const job = "scale"

func main() {
	var (
		binary    = flag.String("coordinator", "bin/coordinator", "the coordinator binary")
		sizes     = flag.String("sizes", "1000,2000,5000,10000", "job sizes: NODES[xPROCESSES][@TTL], e.g. 10000x8@15s")
		losses    = flag.Int("losses", 3, "member losses measured at each size")
		procs     = flag.Int("agent-procs", 4, "agent processes")
		clients   = flag.Int("clients", 8, "etcd clients of each agent process")
		ttl       = flag.Duration("ttl", 5*time.Second, "the nodes' lease TTL")
		out       = flag.String("out", "", "append the report to this file")
		agentMode = flag.String("agents", "", "internal: run as an agent process against this etcd endpoint")
		nproc     = flag.Int("nproc", 1, "internal: the agent process's processes a node")
	)
	flag.StringVar(&keepLogs, "logs", "", "keep each size's log (etcd, coordinator, agents) in this directory")
	flag.Parse()
	if *agentMode != "" {
		if err := runAgents(*agentMode, *clients, *ttl, *nproc); err != nil {
			fmt.Fprintln(os.Stderr, "agents:", err)
			os.Exit(1)
		}
		return
	}
	var results []result
	for _, s := range strings.Split(*sizes, ",") {
		sz, err := parseSize(s, *ttl)
		if err != nil {
			fatalf("-sizes: %v", err)
		}
		fmt.Fprintf(os.Stderr, "== %s nodes, TTL %s\n", s, sz.ttl)
		r, err := measure(*binary, sz, *losses, *procs, *clients)
		if err != nil {
			// Reported, not fatal: the sizes after it still run.
			r = result{size: sz, failed: err.Error()}
		}
		results = append(results, r)
		fmt.Fprintln(os.Stderr, r.row())
	}
	text := reportText(results, *losses, *procs, *clients)
	fmt.Print(text)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(text), 0o644); err != nil {
			fatalf("write %s: %v", *out, err)
		}
	}
}

// size is one configuration to measure.
type size struct {
	label string
	nodes int
	nproc int
	ttl   time.Duration
}

func parseSize(s string, ttl time.Duration) (size, error) {
	s, t, hasTTL := strings.Cut(s, "@")
	if hasTTL {
		d, err := time.ParseDuration(t)
		if err != nil || d < 2*time.Second {
			return size{}, fmt.Errorf("%q: a TTL of at least 2s after @", t)
		}
		ttl = d
	}
	n, p, hasP := strings.Cut(s, "x")
	nodes, err := strconv.Atoi(n)
	if err != nil || nodes < 2 {
		return size{}, fmt.Errorf("%q: want NODES or NODESxPROCESSES", s)
	}
	nproc := 1
	if hasP {
		if nproc, err = strconv.Atoi(p); err != nil || nproc < 1 {
			return size{}, fmt.Errorf("%q: want NODES or NODESxPROCESSES", s)
		}
	}
	return size{label: s, nodes: nodes, nproc: nproc, ttl: ttl}, nil
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-scale: "+format+"\n", args...)
	os.Exit(1)
}
