package membership_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

func TestValidateJobID(t *testing.T) {
	for _, ok := range []string{"a", "ab", "job-1", "0", strings.Repeat("a", 63)} {
		assert.NoError(t, membership.ValidateJobID(ok), ok)
	}
	for _, bad := range []string{"", "A", "Bad_Name", "-a", "a-", "a.b", "a/b", "a b", strings.Repeat("a", 64), "é"} {
		err := membership.ValidateJobID(bad)
		assert.ErrorIs(t, err, membership.ErrInvalidJobID, bad)
	}
}

func TestKeys(t *testing.T) {
	k := membership.DefaultKeys()
	assert.Equal(t, "/elastic/jobs/a/spec", k.Spec("a"))
	assert.Equal(t, "/elastic/jobs/a/nodes/", k.Nodes("a"))
	assert.Equal(t, "/elastic/jobs/a/nodes/pod-0", k.Node("a", "pod-0"))
	assert.Equal(t, "/elastic/jobs/a/events/00000000000000000042", k.Event("a", 42))
	assert.Equal(t, "/elastic/leader", k.Leader())
	assert.False(t, strings.HasPrefix(k.Spec("ab"), k.Job("a")), "job a's prefix does not cover job ab")

	custom, err := membership.NewKeys("/team/x/")
	require.NoError(t, err)
	assert.Equal(t, "/team/x/jobs/a/plan", custom.Plan("a"))
	for _, bad := range []string{"team", "/team", "team/", "//", "/a//b/"} {
		_, err := membership.NewKeys(bad)
		assert.ErrorIs(t, err, membership.ErrInvalidPrefix, bad)
	}
}

func TestParseJobKey(t *testing.T) {
	k := membership.DefaultKeys()
	for key, want := range map[string]membership.JobKey{
		k.Spec("a"):                  {Job: "a", Kind: membership.KindSpec},
		k.Plan("ab"):                 {Job: "ab", Kind: membership.KindPlan},
		k.Status("a"):                {Job: "a", Kind: membership.KindStatus},
		k.Node("a", "n-0.x"):         {Job: "a", Kind: membership.KindNode, Name: "n-0.x"},
		k.Event("a", 7):              {Job: "a", Kind: membership.KindEvent, Name: "00000000000000000007"},
		k.Eviction("a", "n", 0x7a3f): {Job: "a", Kind: membership.KindEviction, Name: "n", Lease: 0x7a3f},
		k.Takeover("a", "n", 0x7a3f): {Job: "a", Kind: membership.KindTakeover, Name: "n", Lease: 0x7a3f},
	} {
		got, ok := k.ParseJobKey(key)
		require.True(t, ok, key)
		assert.Equal(t, want, got, key)
	}
	for _, key := range []string{"/elastic/jobs/", "/elastic/jobs/a", "/elastic/jobs/A/spec", "/elastic/jobs/a/other",
		"/elastic/jobs/a/nodes/", "/elastic/jobs/a/nodes/x/y", "/elastic/jobs/a/events/x", "/other/jobs/a/spec",
		"/elastic/jobs/a/evictions/n", "/elastic/jobs/a/evictions/n/", "/elastic/jobs/a/evictions/n/0", "/elastic/jobs/a/evictions/n/07a",
		"/elastic/jobs/a/evictions/n/-1", "/elastic/jobs/a/evictions/n/7A", "/elastic/jobs/a/evictions/n/x",
		"/elastic/jobs/a/takeovers/n", "/elastic/jobs/a/takeovers/n/0", "/elastic/jobs/a/takeovers/n/07a",
		// The job's secret is no record the coordinator reads.
		k.Secret("a")} {
		_, ok := k.ParseJobKey(key)
		assert.False(t, ok, key)
	}
}

func FuzzParseJobKey(f *testing.F) {
	k := membership.DefaultKeys()
	for _, s := range []string{k.Spec("a"), k.Node("a", "b"), k.Event("a", 1), k.Eviction("a", "b", 1), k.Takeover("a", "b", 1), "/elastic/jobs//spec", "/elastic/jobs/a/nodes/../x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		jk, ok := k.ParseJobKey(key)
		if !ok {
			return
		}
		require.NoError(t, membership.ValidateJobID(jk.Job))
		require.True(t, strings.HasPrefix(key, k.Job(jk.Job)), "a parsed key lies under its job's prefix")
		switch jk.Kind {
		case membership.KindNode:
			require.Equal(t, k.Node(jk.Job, jk.Name), key)
		case membership.KindEviction:
			require.Equal(t, k.Eviction(jk.Job, jk.Name, jk.Lease), key)
		case membership.KindTakeover:
			require.Equal(t, k.Takeover(jk.Job, jk.Name, jk.Lease), key)
		}
	})
}
