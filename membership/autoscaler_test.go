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
