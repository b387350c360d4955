package handover_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/handover"
)

const validState = `{"version":1,"cluster":7,"prefix":"/elastic/","job":"j","node":"j-0","boot":"b","pidns":"pid:[1]",
"pid":10,"start":20,"lease":30,"ttlSeconds":3,"guard":{"pid":11,"start":21,"marker":"00ff","cgroup":"/sys/fs/cgroup/x/elastic-guard-11"}}`

func TestDecodeRefusesWhatItCannotActOnSafely(t *testing.T) {
	_, err := handover.Decode([]byte(validState))
	require.NoError(t, err)
	for _, tc := range []struct{ name, from, to string }{
		{"not json", validState, "{"},
		{"another version", `"version":1`, `"version":2`},
		{"a job that is no key", `"job":"j"`, `"job":"J/x"`},
		{"a node that is no key", `"node":"j-0"`, `"node":"../x"`},
		{"no sidecar pid", `"pid":10`, `"pid":0`},
		{"no start time", `"start":20`, `"start":0`},
		{"a negative lease", `"lease":30`, `"lease":-30`},
		{"no boot id", `"boot":"b"`, `"boot":""`},
		{"a marker that matches everything", `"marker":"00ff"`, `"marker":""`},
		{"a marker that is not hex", `"marker":"00ff"`, `"marker":"x\u0000"`},
		{"a cgroup outside the hierarchy", `/sys/fs/cgroup/x/elastic-guard-11`, `/home/u/elastic-guard-11`},
		{"a cgroup not a guard's", `/sys/fs/cgroup/x/elastic-guard-11`, `/sys/fs/cgroup/system.slice`},
		{"a cgroup path that climbs", `/sys/fs/cgroup/x/elastic-guard-11`, `/sys/fs/cgroup/../elastic-guard-11`},
		{"no guard pid", `"pid":11`, `"pid":-1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := strings.Replace(validState, tc.from, tc.to, 1)
			require.NotEqual(t, validState, data)
			_, err := handover.Decode([]byte(data))
			require.ErrorIs(t, err, handover.ErrInvalidState)
			assert.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(validState))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := handover.Decode(data)
		if err != nil {
			require.ErrorIs(t, err, handover.ErrInvalidState)
			assert.NotContains(t, err.Error(), "\n")
			return
		}
		enc, err := handover.Encode(s)
		require.NoError(t, err)
		again, err := handover.Decode(enc)
		require.NoError(t, err, "re-decoding %s", enc)
		require.Equal(t, s, again)
	})
}
