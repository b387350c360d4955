package membership_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

func TestParseNP(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want membership.NP
		err  string
	}{
		{in: "4", want: membership.NP{Min: 4, Max: 4}},
		{in: " 4 ", want: membership.NP{Min: 4, Max: 4}},
		{in: "2:8", want: membership.NP{Min: 2, Max: 8}},
		{in: "3:3", want: membership.NP{Min: 3, Max: 3}},
		{in: "100000", want: membership.NP{Min: 100000, Max: 100000}},
		{in: "0", err: `membership: invalid np "0": 0 nodes: need at least 1`},
		{in: "-1", err: `membership: invalid np "-1": "-1" is not a positive whole number`},
		{in: "5:2", err: `membership: invalid np "5:2": minimum 5 is greater than maximum 2`},
		{in: "abc", err: `membership: invalid np "abc": "abc" is not a positive whole number`},
		{in: "1:100001", err: `membership: invalid np "1:100001": 100001 is more than the maximum of 100000 nodes`},
		{in: "99999999999999999999", err: "more than the maximum"},
		{in: "", err: "membership: invalid np: empty, want N or MIN:MAX"},
		{in: ":4", err: "missing number"},
		{in: "+4", err: "not a positive whole number"},
		{in: "4.0", err: "not a positive whole number"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := membership.ParseNP(tc.in)
			if tc.err != "" {
				require.ErrorIs(t, err, membership.ErrInvalidNP)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestNPJSON(t *testing.T) {
	var s struct{ NP membership.NP }
	require.NoError(t, json.Unmarshal([]byte(`{"NP": 4}`), &s), "a bare number is accepted")
	assert.Equal(t, membership.NP{Min: 4, Max: 4}, s.NP)
	require.NoError(t, json.Unmarshal([]byte(`{"NP": "2:6"}`), &s))
	out, err := json.Marshal(s)
	require.NoError(t, err)
	assert.JSONEq(t, `{"NP": "2:6"}`, string(out))
	assert.Error(t, json.Unmarshal([]byte(`{"NP": [1]}`), &s))
	assert.Error(t, json.Unmarshal([]byte(`{"NP": 0}`), &s))
}

func FuzzParseNP(f *testing.F) {
	for _, s := range []string{"4", "2:8", "0", "-1", "5:2", "abc", "1:100001", "", ":", "1:", "007:8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		np, err := membership.ParseNP(s)
		if err != nil {
			require.ErrorIs(t, err, membership.ErrInvalidNP)
			return
		}
		require.NoError(t, np.Validate())
		again, err := membership.ParseNP(np.String())
		require.NoError(t, err)
		require.Equal(t, np, again, "String and ParseNP round-trip")
	})
}

// A status of a job without a spec holds the zero np: it is written as ""
// and read back as zero, while a spec refuses it.
func TestZeroNPIsTheEmptyString(t *testing.T) {
	data, err := json.Marshal(membership.NP{})
	require.NoError(t, err)
	assert.Equal(t, `""`, string(data))
	var np membership.NP
	require.NoError(t, json.Unmarshal([]byte(`""`), &np))
	assert.True(t, np.IsZero())
	_, err = membership.DecodeSpec([]byte(`{"np":""}`))
	assert.ErrorIs(t, err, membership.ErrInvalidRecord)
	assert.Equal(t, membership.NP{Min: 3, Max: 3}, membership.FixedNP(3))
}
