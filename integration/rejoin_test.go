package integration

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/membership"
)

// A sidecar killed with SIGKILL and started again by `run` kills what its
// guard left and revokes its own old lease: with a TTL of 10 s the node is
// back, and the job runs again, before that lease would have expired.
func TestASidecarStartedAgainTakesItsNodeBackBeforeItsOldLeaseExpires(t *testing.T) {
	t.Parallel()
	r := startRun(t, []string{"--np", "2", "--job", "rejoin", "--ttl", "10s"}, toy, "TOY_STEPS=100000", "TOY_INTERVAL=0.05")
	first := r.startsOf(1, 2)
	r.status("rejoin", "Running generation 1", func(s membership.Status) bool {
		return s.Phase == membership.JobRunning && s.Generation == 1
	})
	old := r.node("rejoin", "rejoin-1")
	ctx, cancel := context.WithTimeout(r.t.Context(), 10*time.Second)
	defer cancel()
	tl, err := r.cli.TimeToLive(ctx, old.Lease)
	require.NoError(t, err)
	// The old lease expires no sooner than this, unless revoked.
	expiresAt := time.Now().Add(time.Duration(tl.TTL) * time.Second)

	require.NoError(t, syscall.Kill(r.sidecarPid("rejoin-1"), syscall.SIGKILL))
	second := r.startsOf(2, 2)
	assert.False(t, proctest.Alive(first[1].pid), "the old trainer is dead")
	assert.NotEqual(t, first[1].pid, second[1].pid)
	r.status("rejoin", "Running generation 2", func(s membership.Status) bool {
		return s.Phase == membership.JobRunning && s.Generation == 2
	})

	back := r.node("rejoin", "rejoin-1")
	assert.NotEqual(t, old.Lease, back.Lease, "the node is back under a new lease")
	events, err := r.client.Events(ctx, "rejoin")
	require.NoError(t, err)
	var running time.Time
	for _, e := range events {
		if e.Type == "GenerationRunning" && e.Generation == 2 {
			running = e.Time
		}
	}
	require.False(t, running.IsZero(), "generation 2 ran: %+v", events)
	assert.True(t, running.Before(expiresAt), "generation 2 ran at %s, before the old lease could expire at %s", running, expiresAt)
	resp, err := r.cli.Get(ctx, membership.DefaultKeys().Takeover("rejoin", "rejoin-1", int64(old.Lease)))
	require.NoError(t, err)
	assert.Len(t, resp.Kvs, 1, "the new sidecar recorded that it took the old lease over")
	tl, err = r.cli.TimeToLive(ctx, old.Lease)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), tl.TTL, "the old lease is revoked")
}

// A second sidecar started for a node whose sidecar runs refuses, naming
// it, and nothing of the node runs twice.
func TestASecondSidecarOfARunningNodeRefuses(t *testing.T) {
	t.Parallel()
	r := startRun(t, []string{"--np", "1", "--job", "twice", "--ttl", "10s"}, toy, "TOY_STEPS=100000", "TOY_INTERVAL=0.05")
	first := r.startsOf(1, 1)
	pid := r.sidecarPid("twice-0")
	stateDir := r.sidecarFlag("twice-0", "--state-dir")
	require.NotEmpty(t, stateDir)

	code, stdout, stderr := cli(t, []string{"ELASTIC_TEST_MARK=" + r.marker}, "sidecar", "--etcd-endpoints", r.endpoint, "--job", "twice", "--node-id", "twice-0",
		"--ttl", "10s", "--state-dir", stateDir, "--", "true")
	assert.Equal(t, 1, code, stdout)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %s", stderr)
	assert.Contains(t, stderr, "node twice-0 of job twice: another sidecar of this node is running: pid "+strconv.Itoa(pid))

	// The same from its variable, and the first sidecar runs on.
	code, _, stderr = cli(t, []string{"ELASTIC_TEST_MARK=" + r.marker, "ELASTIC_STATE_DIR=" + stateDir}, "sidecar", "--etcd-endpoints", r.endpoint,
		"--job", "twice", "--node-id", "twice-0", "--ttl", "10s", "--", "true")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "pid "+strconv.Itoa(pid))
	assert.True(t, proctest.Alive(pid))
	assert.True(t, proctest.Alive(first[0].pid), "its trainer runs on")
	st := r.status("twice", "Running generation 1", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	assert.Equal(t, int64(1), st.Generation)
	assert.Len(t, r.starts(), 1, "nothing started twice")
}

// A state file that cannot be read is one warning: the sidecar started
// again runs as without it, waiting for its predecessor's lease to expire.
func TestAStateFileWithBadContentsIsAWarning(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	r := startRun(t, []string{"--np", "2", "--job", "badstate", "--ttl", "2s", "--data-dir", data}, toy, "TOY_STEPS=100000", "TOY_INTERVAL=0.05")
	r.startsOf(1, 2)
	files, err := filepath.Glob(filepath.Join(data, "sidecars", "badstate_badstate-1_*.json"))
	require.NoError(t, err)
	require.Len(t, files, 1, "the sidecar keeps its state in run's data directory")
	require.NoError(t, os.WriteFile(files[0], []byte(`{"version":1,"job":"x"`), 0o600))

	require.NoError(t, syscall.Kill(r.sidecarPid("badstate-1"), syscall.SIGKILL))
	r.startsOf(2, 2)
	out := r.out.String()
	assert.Contains(t, out, "state file ignored")
	assert.NotContains(t, out, "panic")
}

// node reads a node's record.
func (r *localRun) node(job, id string) membership.LiveNode {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 10*time.Second)
	defer cancel()
	nodes, err := r.client.Nodes(ctx, job)
	require.NoError(r.t, err)
	for _, n := range nodes {
		if n.ID == id {
			return n
		}
	}
	r.t.Fatalf("no node %s in %+v", id, nodes)
	return membership.LiveNode{}
}

// sidecarFlag is the value of a flag on a node's sidecar's command line.
func (r *localRun) sidecarFlag(node, flag string) string {
	r.t.Helper()
	pid := r.sidecarPid(node)
	for _, p := range processesWithMarker(r.marker) {
		if p.Pid != pid {
			continue
		}
		for i := 0; i+1 < len(p.Args); i++ {
			if p.Args[i] == flag {
				return p.Args[i+1]
			}
		}
	}
	return ""
}
