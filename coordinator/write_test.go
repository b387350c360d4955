package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// A transaction can be applied by etcd and still be reported as failed (a
// timeout, a lost connection). The decision made next, from a view that
// lacks that write, must not replace the plan it never saw with another
// table for the same generation.
func TestADecisionNeverReplacesAPlanItDidNotSee(t *testing.T) {
	for _, tc := range []struct {
		name       string
		chunkBytes int
	}{
		{"a table in the plan's transaction", 0},
		{"a table written chunk by chunk before its plan", 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := etcdtest.Start(t)
			cli := srv.Client(t)
			c, err := New(Config{Client: cli, TableChunkBytes: tc.chunkBytes})
			require.NoError(t, err)
			session, err := concurrency.NewSession(cli)
			require.NoError(t, err)
			t.Cleanup(func() { _ = session.Close() })
			election := concurrency.NewElection(session, c.cfg.Keys.Leader())
			require.NoError(t, election.Campaign(t.Context(), "c1"))
			a := newJobActor(newTerm(c, election.Key(), election.Rev()), "job")

			// Another decision's plan, applied by etcd, with its table.
			nodes := live("a", "b", "c")
			stored, err := membership.StorePlan(*runPlan(1, nodes[:2]), nil, nil, tc.chunkBytes)
			require.NoError(t, err)
			ops := []clientv3.Op{clientv3.OpPut(c.cfg.Keys.Plan("job"), stored.Record)}
			for i, chunk := range stored.Chunks {
				ops = append(ops, clientv3.OpPut(c.cfg.Keys.TableChunk("job", 1, i), string(chunk)))
			}
			_, err = cli.Txn(t.Context()).Then(ops...).Commit()
			require.NoError(t, err)
			applied := stored.Plan
			require.Equal(t, tc.chunkBytes == 0, len(stored.Chunks) == 1)

			// The actor's view still lacks it: it decides generation 1 anew.
			stale := view{job: "job", spec: ptr(spec("2")), nodes: []membership.LiveNode{nodes[2], nodes[0]}}
			d := decide(stale, memo{}, tm, time.Now())
			require.NotNil(t, d.plan)
			require.NotEqual(t, applied.Members, d.plan.Members, "the stale decision is another table")

			err = a.write(t.Context(), stale, d)
			require.ErrorIs(t, err, errPlanMoved)
			got, err := jobclient.New(cli, c.cfg.Keys).Plan(t.Context(), "job")
			require.NoError(t, err, "the table the plan names is intact")
			assert.Equal(t, applied.Members, got.Members, "the plan etcd holds was not replaced")
			latest, err := membership.ReadTableSnapshot(t.Context(), cli, c.cfg.Keys, "job", *applied.Table, 0)
			require.NoError(t, err)
			_, err = membership.DecodeTableSnapshot(latest, applied.Table.Digest)
			require.NoError(t, err, "nor were the chunks of its table, as they stand now")

			// The actor took the plan it had missed; its table comes from
			// etcd, not from a watch it is ahead of.
			require.NoError(t, a.readPlanTable(t.Context()))
			a.mu.Lock()
			defer a.mu.Unlock()
			require.NotNil(t, a.plan)
			require.NoError(t, a.planErr)
			assert.False(t, a.plan.Unresolved())
			assert.Equal(t, applied.Members, a.plan.Members)
		})
	}
}

// A job's timeline keeps its last 1,000 events: older ones are deleted in
// the transaction that writes new ones.
func TestEventsPerJobAreCapped(t *testing.T) {
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

	for seq := int64(1); seq <= maxEventsPerJob; seq++ {
		_, err := cli.Put(t.Context(), c.cfg.Keys.Event("job", seq), `{"seq":1,"type":"x"}`)
		require.NoError(t, err)
	}
	a.lastSeq = maxEventsPerJob
	d := decision{events: []membership.Event{{Generation: 1, Type: "GenerationRunning"}, {Generation: 1, Type: "GenerationRunning"}}}
	require.NoError(t, a.write(t.Context(), view{job: "job"}, d))
	resp, err := cli.Get(t.Context(), c.cfg.Keys.Events("job"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, maxEventsPerJob)
	assert.Equal(t, c.cfg.Keys.Event("job", 3), string(resp.Kvs[0].Key), "the two oldest went")
}
