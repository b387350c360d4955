package policysim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/autoscale"
	"github.com/elastictraining/coordinator/bench/internal/policysim"
)

func nodes(n int, milliCPU int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = milliCPU
	}
	return out
}

func TestALoneJobRunsItsWorkAtItsSpeedAfterTheRestartCost(t *testing.T) {
	cfg := policysim.Config{NodeMilliCPU: nodes(2, 10000), RestartCost: 10 * time.Second, Limit: time.Hour}
	job := policysim.Job{ID: "a", Min: 4, Max: 4, Work: 400, WorkerMilliCPU: 5000}
	r, err := policysim.Run(cfg, []policysim.Job{job}, policysim.Fixed{})
	require.NoError(t, err)
	// Four workers at perfect scaling do 400 worker-seconds in 100 s,
	// after 10 s of start.
	assert.Equal(t, 110*time.Second, r.AvgJCT)
	assert.Equal(t, time.Duration(0), r.AvgPending)
	assert.Zero(t, r.Restarts)
	assert.InDelta(t, 1.0, r.Utilization, 0.01)
}

func TestThePolicyRestartsLessThanOneTrainerAPassAndFinishesSooner(t *testing.T) {
	trace := policysim.Synthetic(policysim.TraceConfig{Jobs: 30, MeanInterarrival: 2 * time.Minute, MedianWork: 3600 * 8,
		WorkerMilliCPU: 5000, Seed: 1})
	cfg := policysim.Config{NodeMilliCPU: nodes(20, 18000), RestartCost: 30 * time.Second, Limit: 48 * time.Hour}
	policy, err := autoscale.New(autoscale.Config{})
	require.NoError(t, err)
	var capacity int64
	for _, c := range cfg.NodeMilliCPU {
		capacity += c
	}
	results := map[string]policysim.Result{}
	for _, s := range []policysim.Scaler{policysim.Fixed{}, policysim.EDL{Period: 5 * time.Second, MaxLoad: 0.97, Capacity: capacity},
		policysim.Policy{Policy: policy}} {
		r, err := policysim.Run(cfg, trace, s)
		require.NoError(t, err)
		results[s.Name()] = r
		t.Logf("%-26s JCT %8s pending %8s utilization %.1f%% restarts/job %.1f", s.Name(), r.AvgJCT.Round(time.Second), r.AvgPending.Round(time.Second),
			100*r.Utilization, r.RestartsPerJob)
	}
	ours, edl, fixed := results["autoscale policy"], results["EDL, one trainer a pass"], results["no autoscaling"]
	assert.Less(t, ours.Restarts, edl.Restarts)
	assert.Less(t, ours.AvgJCT, fixed.AvgJCT)
	assert.Less(t, ours.AvgPending, fixed.AvgPending)
}
