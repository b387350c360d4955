package membership_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

func TestJobIDForPaddleJobIDs(t *testing.T) {
	for _, label := range []string{"a", "job-1", strings.Repeat("a", 63)} {
		id, err := membership.JobIDFor(label)
		require.NoError(t, err)
		assert.Equal(t, label, id, "a DNS-1123 label is its own id")
	}
	seen := map[string]string{}
	for _, name := range []string{"XXXXXX", "xxxxxx ", "job_1", "Job_1", "job 1", "___", "训练", "a.b/c", strings.Repeat("A_", 100)} {
		id, err := membership.JobIDFor(name)
		require.NoError(t, err, name)
		require.NoError(t, membership.ValidateJobID(id), "%q → %q", name, id)
		again, _ := membership.JobIDFor(name)
		assert.Equal(t, id, again, "the same name gives the same id on every node")
		if other, dup := seen[id]; dup {
			t.Errorf("%q and %q share the id %q", name, other, id)
		}
		seen[id] = name
	}
	id, _ := membership.JobIDFor("job_1")
	assert.Regexp(t, `^job-1-[0-9a-f]{6}$`, id)
	id, _ = membership.JobIDFor("XXXXXX")
	assert.Regexp(t, `^xxxxxx-[0-9a-f]{6}$`, id)

	for _, bad := range []string{"", "   ", "a\nb", "a\x00", string([]byte{0xff}), strings.Repeat("a", 254)} {
		_, err := membership.JobIDFor(bad)
		assert.ErrorIs(t, err, membership.ErrInvalidJobID, "%q", bad)
	}
}

func FuzzJobIDFor(f *testing.F) {
	for _, s := range []string{"XXXXXX", "job_1", "a", "", "训练-1", "--"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		id, err := membership.JobIDFor(name)
		if err != nil {
			return
		}
		if err := membership.ValidateJobID(id); err != nil {
			t.Fatalf("%q → %q: %v", name, id, err)
		}
	})
}
