package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/internal/testkit/etcdcluster"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/internal/testkit/tcpproxy"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// jobCluster is a job's processes as a real cluster runs them, each a process
// of the binary: an etcd, coordinator replicas, and sidecars that reach
// etcd each through a proxy of its own, which a test can cut. The sidecars
// run testdata/fencetrainer.sh, which logs its starts and heartbeats.
type jobCluster struct {
	t       *testing.T
	job     string
	dir     string
	etcdURL string
	marker  string
	log     string
	cli     *clientv3.Client
	client  *jobclient.Client
}

// clusterNode is one sidecar and its link to etcd (none on three members).
type clusterNode struct {
	id    string
	proxy *tcpproxy.Proxy
	proc  *bgProcess
}

func newJobCluster(t *testing.T, job string) *jobCluster {
	t.Helper()
	c := &jobCluster{t: t, job: job, dir: t.TempDir(), marker: newMarker()}
	c.etcdURL = "http://127.0.0.1:" + freePort(t)
	etcdProc := background(t, nil, "etcd", "--data-dir", filepath.Join(c.dir, "etcd"), "--listen-client-urls", c.etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+freePort(t))
	require.Eventually(t, func() bool { return strings.Contains(etcdProc.out.String(), "etcd serving clients") },
		30*time.Second, 10*time.Millisecond, "etcd never served:\n%s", etcdProc.out)
	c.connect()
	return c
}

// newJobClusterOnThreeMembers is a job cluster whose etcd is three members;
// its sidecars reach them directly, without a proxy.
func newJobClusterOnThreeMembers(t *testing.T, job string) (*jobCluster, *etcdcluster.Cluster) {
	t.Helper()
	c := &jobCluster{t: t, job: job, dir: t.TempDir(), marker: newMarker()}
	etcd, err := etcdcluster.Start(t.Context(), etcdcluster.Config{Binary: binary, Dir: filepath.Join(c.dir, "etcd"),
		Env: []string{"ELASTIC_TEST_MARK=" + c.marker}})
	require.NoError(t, err)
	c.etcdURL = strings.Join(etcd.Endpoints(), ",")
	c.connect()
	t.Cleanup(etcd.Close) // before the check for processes left behind
	return c, etcd
}

// connect makes the cluster's etcd client, and checks at the end that no
// process of the test is left.
func (c *jobCluster) connect() {
	t := c.t
	c.log = filepath.Join(c.dir, "trainer.log")
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: strings.Split(c.etcdURL, ",")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	c.cli, c.client = cli, jobclient.New(cli, membership.DefaultKeys())
	t.Cleanup(func() {
		var left []proctest.Process
		require.Eventually(t, func() bool {
			left = processesWithMarker(c.marker)
			return len(left) == 0
		}, 30*time.Second, 20*time.Millisecond, "processes left behind: %+v", &left)
	})
}

// serve starts a coordinator replica.
func (c *jobCluster) serve(args ...string) *bgProcess {
	return background(c.t, []string{"ELASTIC_TEST_MARK=" + c.marker},
		append([]string{"serve", "--etcd-endpoints", c.etcdURL, "--listen-metrics", "127.0.0.1:" + freePort(c.t)}, args...)...)
}

// sidecar starts a node running the fence trainer; env goes to the
// trainer, args to the sidecar.
func (c *jobCluster) sidecar(id string, env []string, args ...string) *clusterNode {
	c.t.Helper()
	return c.sidecarIn(nil, id, env, args...)
}

// sidecarIn is sidecar in a cgroup of proctest.Cgroup's (nil: the test's
// own).
func (c *jobCluster) sidecarIn(cg *os.File, id string, env []string, args ...string) *clusterNode {
	c.t.Helper()
	n := &clusterNode{id: id}
	endpoints := c.etcdURL
	if !strings.Contains(c.etcdURL, ",") {
		proxy, err := tcpproxy.Start(strings.TrimPrefix(c.etcdURL, "http://"))
		require.NoError(c.t, err)
		c.t.Cleanup(proxy.Close)
		n.proxy, endpoints = proxy, "http://"+proxy.Addr()
	}
	argv := append([]string{"sidecar", "--etcd-endpoints", endpoints, "--job", c.job, "--node-id", id,
		"--host", "127.0.0.1", "--port", freePort(c.t), "--master-port", freePort(c.t), "--log-level", "debug"}, args...)
	argv = append(argv, "--", "testdata/fencetrainer.sh")
	n.proc = backgroundIn(c.t, cg, append([]string{"ELASTIC_TEST_MARK=" + c.marker, "FT_LOG=" + c.log}, env...), argv...)
	return n
}

// freeze stops a process with SIGSTOP; the test's end thaws it.
func freezePid(t *testing.T, pid int) {
	t.Helper()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
}

// freezeTree stops a process and everything below it with SIGSTOP, as a
// paused container or a frozen machine is, and returns them top down; the
// test's end thaws them.
func freezeTree(t *testing.T, root int) []int {
	t.Helper()
	order := proctest.FreezeTree(root)
	require.NotEmpty(t, order, "process %d could not be stopped", root)
	t.Cleanup(func() { proctest.Thaw(order) })
	return order
}

// status waits until the job's status satisfies ok.
func (c *jobCluster) status(what string, ok func(membership.Status) bool) membership.Status {
	c.t.Helper()
	var last membership.Status
	require.Eventually(c.t, func() bool {
		ctx, cancel := context.WithTimeout(c.t.Context(), 5*time.Second)
		defer cancel()
		s, err := c.client.Status(ctx, c.job)
		last = s
		return err == nil && ok(s)
	}, 90*time.Second, 10*time.Millisecond, "job %s never %s; last status %+v", c.job, what, &last)
	return last
}

// running waits until generation gen, or a later one, runs with n members.
func (c *jobCluster) running(gen int64, n int) membership.Status {
	c.t.Helper()
	return c.status(fmt.Sprintf("ran generation %d with %d members", gen, n), func(s membership.Status) bool {
		return s.Phase == membership.JobRunning && s.Generation >= gen && s.Members == n
	})
}

// beat is one line of the fence trainer's log.
type beat struct {
	kind           string
	gen, rank, pid int
	micros         int64
}

// beats reads the fence trainer's log.
func readBeats(t *testing.T, path string) []beat {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []beat
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 5 {
			continue
		}
		var n [4]int64
		ok := true
		for i := range n {
			v, err := strconv.ParseInt(f[i+1], 10, 64)
			n[i], ok = v, ok && err == nil
		}
		if ok {
			out = append(out, beat{kind: f[0], gen: int(n[0]), rank: int(n[1]), pid: int(n[2]), micros: n[3]})
		}
	}
	return out
}

// overlaps lists every sign of life of a generation's process after the
// first process of a later generation started: the promise is that there is
// none.
func overlaps(beats []beat) []string {
	firstStart := map[int]int64{}
	for _, b := range beats {
		if b.kind == "start" {
			if t, ok := firstStart[b.gen]; !ok || b.micros < t {
				firstStart[b.gen] = b.micros
			}
		}
	}
	var gens []int
	for g := range firstStart {
		gens = append(gens, g)
	}
	sort.Ints(gens)
	var out []string
	for _, b := range beats {
		for _, g := range gens {
			if g > b.gen && b.micros >= firstStart[g] {
				out = append(out, fmt.Sprintf("generation %d rank %d (pid %d) alive %.3fs after generation %d started",
					b.gen, b.rank, b.pid, float64(b.micros-firstStart[g])/1e6, g))
				break
			}
		}
	}
	return out
}

// startsOf returns the start lines of generation gen.
func startsOfGen(beats []beat, gen int) []beat {
	var out []beat
	for _, b := range beats {
		if b.kind == "start" && b.gen == gen {
			out = append(out, b)
		}
	}
	return out
}

// waitStarts waits until generation gen has started n trainers.
func (c *jobCluster) waitStarts(gen, n int) []beat {
	c.t.Helper()
	var got []beat
	require.Eventually(c.t, func() bool {
		got = startsOfGen(readBeats(c.t, c.log), gen)
		return len(got) >= n
	}, 90*time.Second, 10*time.Millisecond, "generation %d never started %d trainers", gen, n)
	return got
}

// requireNoOverlap checks the promise over the whole log.
func requireNoOverlap(t *testing.T, log string) {
	t.Helper()
	if o := overlaps(readBeats(t, log)); len(o) > 0 {
		if len(o) > 10 {
			o = append(o[:10], fmt.Sprintf("... and %d more", len(o)-10))
		}
		t.Fatalf("a rank was held by two processes:\n%s", strings.Join(o, "\n"))
	}
}
