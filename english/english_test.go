package english_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/english"
)

func TestCount(t *testing.T) {
	for want, got := range map[string]string{
		"1 node":        english.Count(1, "node"),
		"0 nodes":       english.Count(0, "node"),
		"2 nodes":       english.Count(2, "node"),
		"3 processes":   english.Count(3, "process"),
		"1 process":     english.Count(1, "process"),
		"2 retries":     english.Count(2, "retry"),
		"2 days":        english.Count(2, "day"),
		"16 ranks":      english.Count(16, "rank"),
		"2 generations": english.Count(2, "generation"),
	} {
		assert.Equal(t, want, got)
	}
}

func TestOneLine(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"a package's prefix goes", "membership: invalid np", "invalid np"},
		{"inside a message too", "scale: jobclient: invalid np", "scale: invalid np"},
		{"every prefix of a chain goes", "x: jobclient: membership: y", "x: y"},
		{"after a parenthesis too", "refused (coordinator: not leader)", "refused (not leader)"},
		{"lines and runs of spaces are one space", "etcd at x:\n  unreachable\t(no answer)\n", "etcd at x: unreachable (no answer)"},
		{"a word that only ends like a package stays", "xguard: y", "xguard: y"},
		{"a package's name without a colon stays", "the sidecar exited", "the sidecar exited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, english.OneLine(tc.in))
		})
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int64]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 102: "102nd", 111: "111th", 1200: "1200th"} {
		assert.Equal(t, want, english.Ordinal(n))
	}
}

func TestBadFlag(t *testing.T) {
	for _, tc := range []struct{ name, value, typ, want string }{
		{"spares", "abc", "int", `--spares "abc": want a whole number such as 1`},
		{"dial-timeout", "nonsense", "duration", `--dial-timeout "nonsense": want a duration such as 30s or 2m`},
		{"wait", "maybe", "bool", `--wait "maybe": want true or false`},
		{"autoscale-min-gain-fraction", "a\tb", "float64", `--autoscale-min-gain-fraction "a\tb": want a number such as 0.5`},
		{"job-kinds", `"x`, "stringSlice", `--job-kinds "\"x": want a comma-separated list such as a,b`},
		{"size", "x", "quantity", `--size "x": want a value of type quantity`},
	} {
		assert.EqualError(t, english.BadFlag(tc.name, tc.value, tc.typ), tc.want)
	}
}
