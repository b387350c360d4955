package flagwords

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBad(t *testing.T) {
	for _, tc := range []struct{ name, value, typ, want string }{
		{"spares", "abc", "int", `--spares "abc": want a whole number such as 1`},
		{"dial-timeout", "nonsense", "duration", `--dial-timeout "nonsense": want a duration such as 30s or 2m`},
		{"wait", "maybe", "bool", `--wait "maybe": want true or false`},
		{"autoscale-min-gain-fraction", "a\tb", "float64", `--autoscale-min-gain-fraction "a\tb": want a number such as 0.5`},
		{"job-kinds", `"x`, "stringSlice", `--job-kinds "\"x": want a comma-separated list such as a,b`},
		{"size", "x", "quantity", `--size "x": want a value of type quantity`},
	} {
		assert.EqualError(t, Bad(tc.name, tc.value, tc.typ), tc.want)
	}
}
