package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The short run of `make test`: one fixed seed for a minute. `make chaos`
// runs more seeds for longer.
func TestChaosShortRun(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "coordinator")
	build := exec.Command("go", "build", "-o", bin, "./cmd/coordinator")
	build.Dir = "../.."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	worker, err := filepath.Abs("worker.sh")
	require.NoError(t, err)

	cfg := defaults()
	cfg.Binary, cfg.Worker = bin, worker
	cfg.Seed, cfg.Duration = 1, 60*time.Second
	var log strings.Builder
	res, err := runSeed(t.Context(), cfg, &log)
	t.Log("\n" + log.String())
	require.NoError(t, err)
	var report strings.Builder
	summarise(&report, cfg, []*result{res})
	t.Log("\n" + report.String())
	assert.Empty(t, res.violations)
	assert.Positive(t, res.injected[killTrainer]+res.injected[partition]+res.injected[freezeNode], "the seed injects node faults")
	if len(res.violations) > 0 {
		t.Logf("the processes' logs are kept in %s", res.dir)
	}
}

// The same seed gives the same schedule, and another seed another one.
func TestTheScheduleFollowsTheSeed(t *testing.T) {
	p := defaults().plan
	p.Duration = 120 * time.Second
	p.Seed = 7
	a, b := schedule(p), schedule(p)
	require.NotEmpty(t, a)
	assert.Equal(t, a, b)
	p.Seed = 8
	assert.NotEqual(t, a, schedule(p))
	for _, f := range a {
		assert.Less(t, f.At+f.For, p.Duration, "%s ends before the run does", f)
	}
}

func TestParseSeeds(t *testing.T) {
	got, err := parseSeeds("1,5,10-12")
	require.NoError(t, err)
	assert.Equal(t, []uint64{1, 5, 10, 11, 12}, got)
	for _, bad := range []string{"", "x", "5-2", "1,,2", "-3"} {
		_, err := parseSeeds(bad)
		assert.Error(t, err, bad)
	}
}
