package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/elastictraining/coordinator/internal/etcdtest"
	"github.com/elastictraining/coordinator/membership"
)

// A transaction can be applied by etcd and still be reported as failed (a
// timeout, a lost connection). The decision made next, from a view that
// lacks that write, must not replace the plan it never saw with another
// table for the same generation.
func TestADecisionNeverReplacesAPlanItDidNotSee(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	c, err := New(Config{Client: cli})
	require.NoError(t, err)
	session, err := concurrency.NewSession(cli)
	require.NoError(t, err)
	t.Cleanup(func() { _ = session.Close() })
	election := concurrency.NewElection(session, c.cfg.Keys.Leader())
	require.NoError(t, election.Campaign(t.Context(), "c1"))
	a := newJobActor(newTerm(c, election.Key(), election.Rev()), "job")

	nodes := live("a", "b", "c")
	applied := runPlan(1, nodes[:2])
	val, err := membership.Encode(applied)
	require.NoError(t, err)
	_, err = cli.Put(t.Context(), c.cfg.Keys.Plan("job"), val)
	require.NoError(t, err)

	// The actor's view still lacks it: it decides generation 1 anew.
	stale := view{job: "job", spec: ptr(spec("2")), nodes: []membership.LiveNode{nodes[2], nodes[0]}}
	d := decide(stale, memo{}, tm, time.Now())
	require.NotNil(t, d.plan)
	require.NotEqual(t, applied.Members, d.plan.Members, "the stale decision is another table")

	err = a.write(t.Context(), stale, d)
	require.ErrorIs(t, err, errPlanMoved)
	got, err := NewClient(cli, c.cfg.Keys).Plan(t.Context(), "job")
	require.NoError(t, err)
	assert.Equal(t, applied.Members, got.Members, "the plan etcd holds was not replaced")
	a.mu.Lock()
	defer a.mu.Unlock()
	require.NotNil(t, a.plan)
	assert.Equal(t, applied.Members, a.plan.Members, "the actor took the plan it had missed")
}
