package membership

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJobRecordsFollowTheirKeys(t *testing.T) {
	var j JobRecords
	spec, err := Encode(DefaultSpec(NP{Min: 2, Max: 2}))
	require.NoError(t, err)
	j.Apply(JobKey{Kind: KindSpec}, KeyValue{Value: []byte(spec)})
	require.NotNil(t, j.Spec)
	assert.Equal(t, 2, j.Spec.NP.Max)

	j.Apply(JobKey{Kind: KindSpec}, KeyValue{Value: []byte(`{"np": "abc"}`)})
	require.NotNil(t, j.Spec, "a malformed record changes nothing: the last good one stands")
	assert.Equal(t, 2, j.Spec.NP.Max)
	var fresh JobRecords
	fresh.Apply(JobKey{Kind: KindSpec}, KeyValue{Value: []byte(`{"np": "abc"}`)})
	assert.Nil(t, fresh.Spec, "a malformed record with none good before is none")
	// ... until the status says what the job runs under, in either order.
	good := DefaultSpec(NP{Min: 3, Max: 3})
	status, err := Encode(Status{Phase: JobRunning, Spec: &good})
	require.NoError(t, err)
	fresh.Apply(JobKey{Kind: KindStatus}, KeyValue{Value: []byte(status)})
	require.NotNil(t, fresh.Spec, "the status's spec stands in for a malformed one")
	assert.Equal(t, 3, fresh.Spec.NP.Max)
	var other JobRecords
	other.Apply(JobKey{Kind: KindStatus}, KeyValue{Value: []byte(status)})
	assert.Nil(t, other.Spec, "a status's spec is no spec where none is stored")
	other.Apply(JobKey{Kind: KindSpec}, KeyValue{Value: []byte(`garbage`)})
	require.NotNil(t, other.Spec)
	assert.Equal(t, 3, other.Spec.NP.Max)
	j.Apply(JobKey{Kind: KindSpec}, KeyValue{Deleted: true})
	assert.Nil(t, j.Spec, "a deleted record is gone")

	j.Apply(JobKey{Kind: KindBridge}, KeyValue{Value: []byte(`{"replicas": 3}`)})
	require.NotNil(t, j.Bridge)
	assert.Equal(t, 3, j.Bridge.Replicas)
	j.Apply(JobKey{Kind: KindNode}, KeyValue{Value: []byte(`{}`)})
	assert.Nil(t, j.Plan, "other keys are not records of the job")
}
