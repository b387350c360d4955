package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// result is what one size measured.
type result struct {
	size size
	// register is from the start of the join to every node registered;
	// join to every member running generation 1.
	register, join time.Duration
	// Each loss: from the lease's revocation to every member running the
	// next generation; and the same change's costs.
	losses                  []time.Duration
	lossCPU, lossEtcdCPU    []time.Duration
	lossSent, lossWAL       []float64
	scale                   time.Duration
	scaleCPU                time.Duration
	joinCPU                 time.Duration
	peakRSS                 int64
	evictions               float64
	renewalsPerSec, idleCPU float64 // etcd, with the job running and nothing changing
	dbAfterJoin, dbAtEnd    float64
	// failed says why the size could not be measured.
	failed string
	// restarts counts sidecars that failed (etcd too slow to register
	// them) and were started again, as a pod's container is.
	restarts int
}

// costs is a reading of the counters a change is charged with.
type costs struct {
	at                  time.Time
	coordCPU, etcdCPU   time.Duration
	sent, wal, renewals float64
	db                  float64
}

func (c *cluster) read() (costs, error) {
	m, err := scrape(c.etcdMetrics)
	if err != nil {
		return costs{}, err
	}
	x := costs{at: time.Now(), sent: m["etcd_network_client_grpc_sent_bytes_total"], wal: m["etcd_disk_wal_write_bytes_total"],
		renewals: m["etcd_debugging_lease_renewed_total"], db: m["etcd_mvcc_db_total_size_in_bytes"]}
	x.coordCPU, _ = processStat(c.serve.Process.Pid)
	x.etcdCPU, _ = processStat(c.etcd.Process.Pid)
	return x, nil
}

func nodeID(i int) string { return fmt.Sprintf("n%05d", i) }

func measure(binary string, sz size, losses, procs, clients int) (result, error) {
	r := result{size: sz}
	c, err := startCluster(binary, sz, procs, clients)
	if err != nil {
		return r, err
	}
	defer c.close()
	timeout := 2*time.Minute + time.Duration(sz.nodes)*30*time.Millisecond

	// Join: N+1 nodes at once, one of them a standby.
	before, err := c.read()
	if err != nil {
		return r, err
	}
	ids := make([][]string, procs)
	for i := range sz.nodes + 1 {
		ids[i%procs] = append(ids[i%procs], nodeID(i))
	}
	start := time.Now()
	for i, a := range c.agents {
		if err := a.send(command{Op: "join", IDs: ids[i]}); err != nil {
			return r, err
		}
	}
	registered := make(chan time.Time, 1)
	go func() {
		for time.Since(start) < timeout {
			if reg, _, _, _, _ := c.state(); reg >= sz.nodes+1 {
				registered <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	gen, last, err := c.waitRunning(0, sz.nodes, timeout)
	if err != nil {
		return r, fmt.Errorf("join: %w", err)
	}
	r.join = last.Sub(start)
	select {
	case at := <-registered:
		r.register = at.Sub(start)
	case <-time.After(timeout):
		return r, fmt.Errorf("join: not every node registered")
	}
	time.Sleep(2 * time.Second) // the running acks
	after, err := c.read()
	if err != nil {
		return r, err
	}
	r.joinCPU, r.dbAfterJoin = after.coordCPU-before.coordCPU, after.db

	// Idle: the renewals' load.
	time.Sleep(5 * time.Second)
	idle, err := c.read()
	if err != nil {
		return r, err
	}
	secs := idle.at.Sub(after.at).Seconds()
	r.renewalsPerSec = (idle.renewals - after.renewals) / secs
	r.idleCPU = (idle.etcdCPU - after.etcdCPU).Seconds() / secs

	// Losses: a member's lease revoked; the standby takes its place.
	next := sz.nodes + 1
	for i := range losses {
		a := c.agents[i%len(c.agents)]
		before, err := c.read()
		if err != nil {
			return r, err
		}
		if err := a.send(command{Op: "lose"}); err != nil {
			return r, err
		}
		var lost report
		select {
		case lost = <-a.lost:
		case <-time.After(30 * time.Second):
			return r, fmt.Errorf("loss %d: the agent lost no node", i+1)
		}
		g, last, err := c.waitRunning(gen, sz.nodes, timeout)
		if err != nil {
			return r, fmt.Errorf("loss %d: %w", i+1, err)
		}
		gen = g
		r.losses = append(r.losses, last.Sub(time.Unix(0, lost.LostAt)))
		time.Sleep(2 * time.Second) // the running acks
		after, err := c.read()
		if err != nil {
			return r, err
		}
		r.lossCPU = append(r.lossCPU, after.coordCPU-before.coordCPU)
		r.lossEtcdCPU = append(r.lossEtcdCPU, after.etcdCPU-before.etcdCPU)
		r.lossSent = append(r.lossSent, after.sent-before.sent)
		r.lossWAL = append(r.lossWAL, after.wal-before.wal)
		// A new standby for the next change.
		if err := a.send(command{Op: "join", IDs: []string{nodeID(next)}}); err != nil {
			return r, err
		}
		next++
		if err := waitFor(timeout, func() bool { reg, _, _, _, _ := c.state(); return reg >= next }); err != nil {
			return r, fmt.Errorf("loss %d: the new standby did not register", i+1)
		}
		time.Sleep(time.Second)
	}

	// One scale step: N → N+1, the standby joins the table.
	before, err = c.read()
	if err != nil {
		return r, err
	}
	start = time.Now()
	scale := exec.Command(binary, "scale", "--etcd-endpoints", c.endpoint, "--job", job, "--np", strconv.Itoa(sz.nodes+1))
	scale.Stderr = os.Stderr
	if err := scale.Run(); err != nil {
		return r, fmt.Errorf("scale: %w", err)
	}
	_, last, err = c.waitRunning(gen, sz.nodes+1, timeout)
	if err != nil {
		return r, fmt.Errorf("scale: %w", err)
	}
	r.scale = last.Sub(start)
	time.Sleep(2 * time.Second)
	after, err = c.read()
	if err != nil {
		return r, err
	}
	r.scaleCPU, r.dbAtEnd = after.coordCPU-before.coordCPU, after.db
	m, err := scrape(c.serveMetrics)
	if err != nil {
		return r, err
	}
	r.evictions = m["elastic_job_evictions_total"]
	r.restarts = c.restarts()
	_, r.peakRSS = processStat(c.serve.Process.Pid)
	return r, nil
}
