package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

func TestAResetDropsEveryJobBeforeTheListing(t *testing.T) {
	keys := membership.DefaultKeys()
	spec := func(owner string) membership.KeyValue {
		s := membership.DefaultSpec(membership.FixedNP(1))
		s.Owner = owner
		val, err := membership.Encode(s)
		require.NoError(t, err)
		return membership.KeyValue{Key: keys.Spec(owner[:1]), Value: []byte(val), CreateRevision: 1}
	}
	r := &Records{Kinds: []membership.KeyKind{membership.KindSpec}}
	r.apply(keys, presence.Update{Changes: []membership.KeyValue{spec("a/ns/a/1"), spec("b/ns/b/1")}})

	u := r.apply(keys, presence.Update{Reset: true, Changes: []membership.KeyValue{spec("b/ns/b/2")}})
	assert.True(t, u.Reset)
	require.Len(t, u.Changes, 3)
	dropped := map[string]string{}
	for _, c := range u.Changes[:2] {
		assert.True(t, c.Dropped)
		assert.Nil(t, c.After)
		dropped[c.Job] = c.Before.Owner
	}
	assert.Equal(t, map[string]string{"a": "a/ns/a/1", "b": "b/ns/b/1"}, dropped)
	listed := u.Changes[2]
	assert.False(t, listed.Dropped)
	assert.Nil(t, listed.Before, "the listing starts from nothing")
	assert.Equal(t, "b/ns/b/2", listed.After.Owner)
	_, ok := r.Get("a")
	assert.False(t, ok, "a job not listed again is gone")
}
