package guard

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The rules of a commit, whoever answers it: the guard or a fence watchdog.
func TestCommitRefusal(t *testing.T) {
	const now = int64(1000)
	current := commitState{generation: 3, killAt: now + 1}
	for _, tc := range []struct {
		name string
		st   commitState
		gen  int64
		want string
	}{
		{"current, deadline ahead", current, 3, ""},
		{"fenced", commitState{fenced: true, generation: 3, killAt: now + 1}, 3, "refused: this node was fenced out: its lease is lost"},
		{"fenced wins over the generation", commitState{fenced: true, generation: 3, killAt: now + 1}, 2, "refused: this node was fenced out: its lease is lost"},
		{"an old generation", current, 2, "refused: generation 2 is over; this node runs generation 3"},
		{"being killed", commitState{generation: 3, killing: true, killAt: now + 1}, 3, "refused: the processes are being killed"},
		{"the deadline now", commitState{generation: 3, killAt: now}, 3, "refused: the lease deadline has passed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.st.refusal(CommitRequest{Op: "check", Generation: tc.gen}, now))
		})
	}
}
