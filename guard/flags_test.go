package guard

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The guard's commands say a bad flag as the command line says its
// others: the flag, the value, what it wants; one line, exit code 2.
func TestTheGuardsCommandsWordABadFlag(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, tc := range []struct {
		name string
		main func(args []string, stderr io.Writer) int
		args []string
		want string
	}{
		{"beat", func(a []string, w io.Writer) int { return BeatMain(a, noEnv, w) }, []string{"--step", "x"},
			`coordinator beat: --step "x": want a whole number such as 1; usage: beat [--step N]`},
		{"beat", func(a []string, w io.Writer) int { return BeatMain(a, noEnv, w) }, []string{"--step=-1"},
			`coordinator beat: --step -1: want a step number, 0 or more`},
		{"commit", func(a []string, w io.Writer) int { return CommitMain(a, noEnv, w) }, []string{"--check=maybe"},
			`coordinator commit: --check "maybe": want true or false (see 'coordinator commit --help')`},
		{"fence-watch", WatchMain, []string{"--lease", "1.5"}, `coordinator fence-watch: --lease "1.5": want a whole number such as 1; started by the guard only`},
		{"guard", func(a []string, w io.Writer) int { return Main(a, io.Discard, w) }, []string{"--marker", "m", "--cgroup", "v1"},
			`coordinator guard: --cgroup "v1": want auto or off; started by the sidecar only`},
		{"guard", func(a []string, w io.Writer) int { return Main(a, io.Discard, w) }, []string{"--deadline-fd", "3", "--marker", "m"},
			`coordinator guard: --deadline-fd 3: want a descriptor other than 3, or 0 for none`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			assert.Equal(t, 2, tc.main(tc.args, &stderr))
			assert.Contains(t, stderr.String(), tc.want)
			assert.Equal(t, 1, bytes.Count(stderr.Bytes(), []byte("\n")), "one line: %q", stderr.String())
		})
	}
	for _, name := range []string{"guard", "fence-watch", "commit", "beat"} {
		assert.NotNil(t, Flags(name), name)
	}
	assert.Nil(t, Flags("run"))
}
