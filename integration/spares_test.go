package integration

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/membership"
)

// sparesRun is a `run --spares 1` of the toy trainer: two members and a
// spare.
func sparesRun(t *testing.T, job string) *localRun {
	t.Helper()
	r := startRun(t, []string{"--np", "2", "--spares", "1", "--job", job, "--ttl", "2s"}, toy, "TOY_STEPS=400", "TOY_INTERVAL=0.05")
	r.startsOf(1, 2)
	return r
}

// planOf is the job's plan once it runs generation gen.
func (r *localRun) planOf(job string, gen int64) membership.Plan {
	r.t.Helper()
	var p membership.Plan
	require.Eventually(r.t, func() bool {
		ctx, cancel := context.WithTimeout(r.t.Context(), 5*time.Second)
		defer cancel()
		var err error
		p, err = r.client.Plan(ctx, job)
		return err == nil && p.Generation == gen && p.Phase == membership.PhaseRun
	}, 60*time.Second, 10*time.Millisecond, "generation %d never committed; plan %+v", gen, &p)
	return p
}

// spareOf is the live worker outside plan p, under its lease, once there
// is exactly one.
func (r *localRun) spareOf(job string, p membership.Plan) membership.LiveNode {
	r.t.Helper()
	members := map[string]bool{}
	for _, m := range p.Members {
		members[m.Node] = true
	}
	var spares []membership.LiveNode
	require.Eventually(r.t, func() bool {
		ctx, cancel := context.WithTimeout(r.t.Context(), 5*time.Second)
		defer cancel()
		nodes, err := r.client.Nodes(ctx, job)
		spares = spares[:0]
		for _, n := range nodes {
			if !members[n.ID] && n.Role == membership.RoleWorker {
				spares = append(spares, n)
			}
		}
		return err == nil && len(spares) == 1
	}, 60*time.Second, 10*time.Millisecond, "never exactly one spare; last %+v", &spares)
	return spares[0]
}

// trainsOn waits until rank 0 has checkpointed steps more steps: the job
// trained on meanwhile, long past any reaction of the coordinator to what
// happened before.
func (r *localRun) trainsOn(steps int) {
	r.t.Helper()
	from := stepOf(r.t, r, 0)
	require.Eventually(r.t, func() bool { return stepOf(r.t, r, 0) >= from+steps }, 60*time.Second, 10*time.Millisecond,
		"rank 0 never trained %d steps past step %d", steps, from)
}

func TestASpareTakesAKilledNodesRankAndTheNodeComesBackAsTheSpare(t *testing.T) {
	t.Parallel()
	r := sparesRun(t, "spare")
	first := r.planOf("spare", 1)
	spare := r.spareOf("spare", first)
	var victim membership.Member
	for _, m := range first.Members {
		if m.Rank == 1 {
			victim = m
		}
	}
	r.status("spare", "ran a few steps", func(membership.Status) bool { return stepOf(t, r, 0) >= 3 })

	require.NoError(t, syscall.Kill(r.sidecarPid(victim.Node), syscall.SIGKILL))
	second := r.planOf("spare", 2)
	var took string
	for _, m := range second.Members {
		if m.Rank == 1 {
			took = m.Node
		}
	}
	assert.Equal(t, spare.ID, took, "the spare took the killed node's rank")
	back := r.spareOf("spare", second)
	assert.Equal(t, victim.Node, back.ID, "the killed node came back as the spare")
	assert.NotEqual(t, victim.Lease, int64(back.Lease), "under a new lease")

	r.trainsOn(20)
	st := r.status("spare", "Running generation 2", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	assert.Equal(t, int64(2), st.Generation, "the node's return restarted nothing")
	assert.Equal(t, 0, st.Restarts, "a lost node spends no restart")
	for rank, s := range r.startsOf(2, 2) {
		assert.Greater(t, s.step, 0, "rank %d resumed", rank)
	}

	code, stdout, stderr := cli(t, nil, "status", "--etcd-endpoints", r.endpoint, "--job", "spare")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, victim.Node+`\s+worker\s+spare\s`, stdout)
	assert.Contains(t, stdout, "Spares: 1 of 1 registered and warm, holding no rank")
}

func TestASpareKilledOrFrozenCostsTheJobNoRestart(t *testing.T) {
	t.Parallel()
	r := sparesRun(t, "sparefault")
	first := r.planOf("sparefault", 1)
	spare := r.spareOf("sparefault", first)

	// Killed: run starts its sidecar again, and it registers again.
	require.NoError(t, syscall.Kill(r.sidecarPid(spare.ID), syscall.SIGKILL))
	require.Eventually(t, func() bool {
		n := r.spareOf("sparefault", first)
		return n.ID == spare.ID && n.Lease != spare.Lease
	}, 60*time.Second, 10*time.Millisecond, "the killed spare never registered again")

	// Frozen, sidecar and guard: its lease expires, and once thawed it
	// fences itself and registers again.
	frozen := r.spareOf("sparefault", first)
	tree := proctest.FreezeTree(r.sidecarPid(spare.ID))
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		nodes, err := r.client.Nodes(ctx, "sparefault")
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.ID == spare.ID {
				return false
			}
		}
		return true
	}, 60*time.Second, 10*time.Millisecond, "the frozen spare's record never went")
	r.trainsOn(10)
	proctest.Thaw(tree)
	require.Eventually(t, func() bool {
		n := r.spareOf("sparefault", first)
		return n.ID == spare.ID && n.Lease != frozen.Lease
	}, 60*time.Second, 10*time.Millisecond, "the thawed spare never registered again")

	r.trainsOn(20)
	st := r.status("sparefault", "Running", func(s membership.Status) bool { return s.Phase == membership.JobRunning })
	assert.Equal(t, int64(1), st.Generation, "nothing that happened to the spare restarted the job")
	assert.Len(t, r.startsOf(1, 2), 2)
}
