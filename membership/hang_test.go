package membership_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

// least is the shortest hang timeout the tests' watch honours.
const least = 500 * time.Millisecond

func TestParseHangTimeout(t *testing.T) {
	d := func(v time.Duration) *membership.Duration { md := membership.Duration(v); return &md }
	for _, tc := range []struct {
		in   string
		want *membership.Duration
		err  string
	}{
		{in: "auto"},
		{in: ""},
		{in: "0", want: d(0)},
		{in: "0s", want: d(0)},
		{in: " 30s ", want: d(30 * time.Second)},
		{in: "500ms", want: d(least)},
		{in: "1.5s", want: d(1500 * time.Millisecond)},
		{in: "1ms", err: "1ms: want 500ms or more, the least the hang watch honours; 0 (off) or auto"},
		{in: "499ms", err: "499ms: want 500ms or more"},
		{in: "-1s", err: "-1s: must not be negative (0 turns it off)"},
		{in: "5", err: `"5": want a duration such as 30s or 2m, 0 (off) or auto`},
		{in: "soon", err: `"soon": want a duration`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := membership.ParseHangTimeout(tc.in, least)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// Whatever it is given, a timeout parsed is auto, off, or one the watch
// honours, and a refusal is one line.
func FuzzParseHangTimeout(f *testing.F) {
	for _, s := range []string{"auto", "0", "1ms", "500ms", "2m", "-1s", "1e3s", "5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := membership.ParseHangTimeout(s, least)
		switch {
		case err != nil:
			if !strings.ContainsAny(s, "\n\r") {
				assert.NotContains(t, err.Error(), "\n")
			}
		case d != nil:
			assert.True(t, *d == 0 || time.Duration(*d) >= least, "%q parsed as %s", s, *d)
		}
	})
}
