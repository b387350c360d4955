package membership_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

func TestDecodeSpecFillsDefaults(t *testing.T) {
	s, err := membership.DecodeSpec([]byte(`{"np":"2:4"}`))
	require.NoError(t, err)
	assert.Equal(t, membership.DefaultSpec(membership.NP{Min: 2, Max: 4}), s)

	for _, bad := range []string{``, `null`, `{}`, `{"np":"0"}`, `{"np":"2","faultTolerance":3}`, `{"np":"2","ps":-1}`,
		`{"np":"2","successPolicy":"Most"}`, `{"np":"2","cleanPodPolicy":"Sometimes"}`, `{"np":"2","maxRestarts":-1}`, `{"np":"2","schedulers":2}`,
		`{"np":"2:4","target":5}`, `{"np":"2:4","target":1}`, `{"np":"2:4","target":-1}`} {
		_, err := membership.DecodeSpec([]byte(bad))
		assert.ErrorIs(t, err, membership.ErrInvalidRecord, bad)
	}
}

func TestATargetNarrowsTheWorkersWithinNP(t *testing.T) {
	s, err := membership.DecodeSpec([]byte(`{"np":"2:60","target":15}`))
	require.NoError(t, err)
	assert.Equal(t, membership.NP{Min: 2, Max: 60}, s.NP)
	assert.Equal(t, membership.NP{Min: 2, Max: 15}, s.Workers())
	s.Target = 0
	assert.Equal(t, s.NP, s.Workers(), "no target: np")
}

func TestDecodeNode(t *testing.T) {
	good := `{"id":"n0","role":"worker","host":"10.0.0.1","ports":[7000,7001],"nproc":2,"masterPort":6000,"state":"running","generation":3}`
	n, err := membership.DecodeNode([]byte(good))
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:7000", "10.0.0.1:7001"}, n.Endpoints())
	withCheckpoint := strings.Replace(good, `"generation":3`, `"generation":3,"checkpoint":"10.0.0.1:7100"`, 1)
	n, err = membership.DecodeNode([]byte(withCheckpoint))
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1:7100", n.Checkpoint)
	for _, bad := range []string{
		`{"id":"n0","role":"worker","host":"h","ports":[7000],"nproc":2,"masterPort":6000,"state":"running"}`,
		`{"id":"n0","role":"worker","host":"h","ports":[0],"nproc":1,"masterPort":6000,"state":"running"}`,
		`{"id":"n0","role":"worker","host":"","ports":[1],"nproc":1,"masterPort":6000,"state":"running"}`,
		`{"id":"n0","role":"boss","host":"h","ports":[1],"nproc":1,"masterPort":6000,"state":"running"}`,
		`{"id":"n0","role":"worker","host":"h","ports":[1],"nproc":1,"masterPort":6000,"state":"dancing"}`,
		`{"id":"../x","role":"worker","host":"h","ports":[1],"nproc":1,"masterPort":6000,"state":"running"}`,
		`{"id":"n0","role":"worker","host":"h","ports":[1],"nproc":1,"masterPort":70000,"state":"running"}`,
		`{"id":"n0","role":"worker","host":"h","ports":[1],"nproc":1,"masterPort":6000,"state":"running","checkpoint":"h"}`,
		`{"id":"n0","role":"worker","host":"h","ports":[1],"nproc":1,"masterPort":6000,"state":"running","checkpoint":":7000"}`,
		`{"id":"n0","role":"worker","host":"h","ports":[1],"nproc":1,"masterPort":6000,"state":"running","checkpoint":"h:0"}`,
	} {
		_, err := membership.DecodeNode([]byte(bad))
		assert.ErrorIs(t, err, membership.ErrInvalidRecord, bad)
	}
}

func TestDecodePlanRejectsInconsistentTables(t *testing.T) {
	member := func(node string, rank int) membership.Member {
		return membership.Member{Node: node, Role: membership.RoleWorker, Rank: rank, Host: "h", Ports: []int{1}, NProc: 1}
	}
	ok := membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{member("a", 0), member("b", 1)},
		Master: "h:6000", DetectedAt: time.Unix(1, 0).UTC()}
	val, err := membership.Encode(ok)
	require.NoError(t, err)
	got, err := membership.DecodePlan([]byte(val))
	require.NoError(t, err)
	assert.Equal(t, ok, got)

	for name, p := range map[string]membership.Plan{
		"generation 0":   {Generation: 0, Phase: membership.PhaseRun},
		"unknown phase":  {Generation: 1, Phase: "pause"},
		"duplicate rank": {Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{member("a", 0), member("b", 0)}},
		"duplicate node": {Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{member("a", 0), member("a", 1)}},
		"bad master":     {Generation: 1, Phase: membership.PhaseRun, Master: "nowhere"},
		"bad result":     {Generation: 1, Phase: membership.PhaseStop, Result: "Maybe"},
	} {
		val, err := membership.Encode(p)
		require.NoError(t, err)
		_, err = membership.DecodePlan([]byte(val))
		assert.ErrorIs(t, err, membership.ErrInvalidRecord, name)
	}
}

func TestStatusDurationsReadAsText(t *testing.T) {
	s := membership.Status{Phase: membership.JobRunning, Steps: &membership.Steps{Total: membership.Duration(1500 * time.Millisecond)}}
	val, err := membership.Encode(s)
	require.NoError(t, err)
	assert.Contains(t, val, `"total":"1.5s"`)
	got, err := membership.DecodeStatus([]byte(val))
	require.NoError(t, err)
	assert.Equal(t, s.Steps, got.Steps)
}

// fuzzDecoder checks that a decoder never panics, and that whatever it
// accepts survives a round trip through Encode.
func fuzzDecoder[T any](f *testing.F, decode func([]byte) (T, error), seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decode(data)
		if err != nil {
			require.ErrorIs(t, err, membership.ErrInvalidRecord)
			return
		}
		val, err := membership.Encode(v)
		require.NoError(t, err)
		again, err := decode([]byte(val))
		require.NoError(t, err, "re-decoding %s", val)
		require.Equal(t, v, again)
	})
}

func FuzzDecodeSpec(f *testing.F) {
	fuzzDecoder(f, membership.DecodeSpec, `{"np":"2:4","ps":1,"faultTolerance":2,"maxRestarts":3,"successPolicy":"Rank0","cleanPodPolicy":"Always"}`, `{"np":4}`, `{}`,
		`{"np":"2:60","target":15,"priority":3}`)
}

func FuzzDecodeNode(f *testing.F) {
	fuzzDecoder(f, membership.DecodeNode, `{"id":"n0","role":"worker","host":"h","ports":[7000],"nproc":1,"masterPort":6000,"state":"running","generation":3,"exitCode":1}`,
		`{"id":"w-3","role":"worker","host":"h","ports":[7000],"nproc":1,"masterPort":6000,"state":"leaving","generation":3,"ordinal":3}`,
		`{"id":"w-4","role":"worker","host":"h","ports":[7000],"nproc":1,"masterPort":6000,"state":"running","generation":3,"checkpoint":"[fd00::1]:7100"}`)
}

func FuzzDecodePlan(f *testing.F) {
	fuzzDecoder(f, membership.DecodePlan,
		`{"generation":2,"phase":"run","members":[{"node":"a","role":"worker","rank":0,"globalRank":0,"host":"h","ports":[1],"nproc":1,"lease":5}],"worldSize":1,"master":"h:2","restarts":1,"reason":"r","detectedAt":"2026-01-01T00:00:00Z"}`,
		`{"generation":3,"phase":"stop","result":"Failed","exitCode":3}`,
		`{"generation":4,"phase":"stop","failure":{"node":"a","role":"worker","rank":1,"exitCode":137}}`)
}

func FuzzDecodeStatus(f *testing.F) {
	fuzzDecoder(f, membership.DecodeStatus, `{"phase":"Running","generation":2,"np":"4","members":4,"ready":4,"worldSize":4,"steps":{"detect":"1ms","stop":"2ms","wait":"0s","start":"5ms","total":"8ms"}}`,
		`{"phase":"Running","generation":2,"updatedAt":"2026-01-01T00:00:00Z","goodput":{"since":"2026-01-01T00:00:00Z","asOf":"2026-01-01T00:00:09Z","now":"training","total":{"training":9}}}`,
		`{"phase":"Waiting","goodput":{"since":"x"}}`)
}

func FuzzDecodeEvent(f *testing.F) {
	fuzzDecoder(f, membership.DecodeEvent, `{"seq":1,"time":"2026-01-01T00:00:00Z","generation":1,"type":"GenerationRunning","message":"m","steps":{"total":"1s"}}`)
}

func FuzzDecodeEviction(f *testing.F) {
	fuzzDecoder(f, membership.DecodeEviction, `{"node":"n1","lease":123,"ttlSeconds":5,"by":"coordinator","reason":"r","at":"2026-01-01T00:00:00Z"}`)
}

func FuzzDecodeTakeover(f *testing.F) {
	fuzzDecoder(f, membership.DecodeTakeover, `{"node":"n1","lease":123,"pid":42,"at":"2026-01-01T00:00:00Z"}`, `{"node":"n1","lease":0}`)
}

func FuzzDecodeBridgeStatus(f *testing.F) {
	fuzzDecoder(f, membership.DecodeBridgeStatus, `{"workload":"StatefulSet/w","replicas":4,"problem":"p","updatedAt":"2026-01-01T00:00:00Z"}`)
}

func FuzzDecodeAutoscalerStatus(f *testing.F) {
	fuzzDecoder(f, membership.DecodeAutoscalerStatus, `{"target":4,"desired":6,"reason":"r","heldBack":"h","changedAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-01T00:00:00Z"}`)
}

func TestHangSaysWhichStepItsNumberIs(t *testing.T) {
	named := membership.Hang{Node: "w-1", Generation: 2, Rank: 1, Step: 1234, Quiet: membership.Duration(2100 * time.Millisecond), Timeout: membership.Duration(2 * time.Second)}
	assert.Equal(t, "rank 1 on node w-1 made no progress for 2.1s (hang timeout 2s) after step 1234; stacks in its log", named.String())
	counted := named
	counted.Step, counted.Counted = 1200, true
	assert.Equal(t, "rank 1 on node w-1 made no progress for 2.1s (hang timeout 2s) after its 1200th step in this process (its own count: it names no step of the job); stacks in its log", counted.String())
	counted.Stopped = true
	assert.Equal(t, "rank 1 on node w-1 was stopped (SIGSTOP, not a debugger) for 2.1s after its 1200th step in this process (its own count: it names no step of the job); stacks in its log", counted.String())
	none := named
	none.Step = 0
	assert.Contains(t, none.String(), "before its first step")
}
