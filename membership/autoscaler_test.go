package membership_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/membership"
)

func TestSetTargetYieldsToWhoeverSetNP(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()
	ctx := t.Context()
	np := membership.NP{Min: 2, Max: 60}
	_, err := membership.UpdateSpec(ctx, cli, keys, "j", func(*membership.Spec) error { return nil }, membership.DefaultSpec(np))
	require.NoError(t, err)

	s, err := membership.SetTarget(ctx, cli, keys, "j", np, 15)
	require.NoError(t, err)
	assert.Equal(t, membership.NP{Min: 2, Max: 15}, s.Spec.Workers())

	_, err = membership.SetTarget(ctx, cli, keys, "j", np, 61)
	assert.ErrorContains(t, err, "target 61: want 0 (none) or within np 2:60")

	// A decision made on np 2:60 is moot once someone set np 4.
	_, err = membership.UpdateSpec(ctx, cli, keys, "j", func(s *membership.Spec) error { s.NP, s.Target = membership.NP{Min: 4, Max: 4}, 0; return nil }, membership.Spec{})
	require.NoError(t, err)
	_, err = membership.SetTarget(ctx, cli, keys, "j", np, 20)
	assert.ErrorIs(t, err, membership.ErrTargetMoot)

	// So is one whose fence fails, and one for a job that has gone.
	_, err = membership.SetTarget(ctx, cli, keys, "j", membership.NP{Min: 4, Max: 4}, 4,
		clientv3.Compare(clientv3.CreateRevision("/no/such/leader"), ">", 0))
	assert.ErrorIs(t, err, membership.ErrTargetMoot)
	_, err = membership.SetTarget(ctx, cli, keys, "gone", np, 4)
	assert.ErrorIs(t, err, membership.ErrTargetMoot)

	// A spec a resource owns is the resource's to change.
	_, err = membership.UpdateSpec(ctx, cli, keys, "owned", func(*membership.Spec) error { return nil },
		membership.Spec{NP: np, FaultTolerance: 1, SuccessPolicy: membership.SuccessAllWorkers, CleanPodPolicy: membership.CleanPodNever, Owner: "ElasticJob/ns/owned/uid"})
	require.NoError(t, err)
	_, err = membership.SetTarget(ctx, cli, keys, "owned", np, 4)
	assert.ErrorIs(t, err, membership.ErrTargetMoot)
}

// A target set over a malformed spec starts from the last good one the
// status keeps, and says that it replaced a malformed value; with none it
// is refused, and the garbage stays.
func TestSetTargetRepairsAMalformedSpec(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()
	ctx := t.Context()
	np := membership.NP{Min: 2, Max: 8}
	_, err := cli.Put(ctx, keys.Spec("j"), "garbage")
	require.NoError(t, err)
	_, err = membership.SetTarget(ctx, cli, keys, "j", np, 4)
	require.ErrorIs(t, err, membership.ErrNoGoodSpec)
	resp, err := cli.Get(ctx, keys.Spec("j"))
	require.NoError(t, err)
	assert.Equal(t, "garbage", string(resp.Kvs[0].Value))

	good := membership.DefaultSpec(np)
	good.MaxRestarts = 9
	status, err := membership.Encode(membership.Status{Phase: membership.JobRunning, NP: np, Spec: &good})
	require.NoError(t, err)
	_, err = cli.Put(ctx, keys.Status("j"), status)
	require.NoError(t, err)
	w, err := membership.SetTarget(ctx, cli, keys, "j", np, 4)
	require.NoError(t, err)
	assert.ErrorIs(t, w.Repaired, membership.ErrInvalidRecord)
	assert.Equal(t, membership.NP{Min: 2, Max: 4}, w.Spec.Workers())
	assert.Equal(t, 9, w.Spec.MaxRestarts)
	resp, err = cli.Get(ctx, keys.Spec("j"))
	require.NoError(t, err)
	stored, err := membership.DecodeSpec(resp.Kvs[0].Value)
	require.NoError(t, err, "the stored spec is good again")
	assert.Equal(t, w.Spec, stored)
}
