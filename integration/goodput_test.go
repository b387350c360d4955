package integration

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

// goodputStatus is what a script reads of `status -o json`'s account.
type goodputStatus struct {
	Phase      string `json:"phase"`
	Generation int64  `json:"generation"`
	Goodput    *struct {
		Ratio           float64            `json:"ratio"`
		WallSeconds     float64            `json:"wallSeconds"`
		TrainingSeconds float64            `json:"trainingSeconds"`
		LostSeconds     map[string]float64 `json:"lostSeconds"`
		LastHour        struct {
			WallSeconds float64 `json:"wallSeconds"`
		} `json:"lastHour"`
		Now string `json:"now"`
	} `json:"goodput"`
}

// A real two-rank PyTorch job whose rank 1 fails after step 25, its last
// save at step 20: the job's account shows the restart, and the steps 22
// to 25 trained again (step 21, the first of generation 2, ends the
// restart) at the step time generation 1 showed. Its seconds add up to its
// wall time, and `status` prints them.
func TestTheJobAccountsARestartAndTheStepsTrainedAgain(t *testing.T) {
	t.Parallel()
	requireTorch(t)
	dir := t.TempDir()
	r := startRun(t, []string{"--np", "2", "--job", "goodput", "--preload", "torch"}, []string{python, "testdata/goodputtrainer.py"},
		"GOODPUT_DIR="+dir, "GOODPUT_FAIL=25@1")
	stepped := func(gen, rank, step int) {
		t.Helper()
		re := regexp.MustCompile(`(?m)^\[rank ` + strconv.Itoa(rank) + `\] goodput gen=` + strconv.Itoa(gen) + ` rank=` + strconv.Itoa(rank) + ` step=` + strconv.Itoa(step) + `$`)
		require.Eventually(t, func() bool { return re.MatchString(r.out.String()) }, 2*time.Minute, 10*time.Millisecond,
			"rank %d never reached step %d in generation %d:\n%s", rank, step, gen, r.out)
	}
	stepped(1, 1, 25)
	stepped(2, 0, 21)

	// The account of generation 2, as a reader sees it once the re-done
	// steps are paid: the stored one, and the time since to training.
	var g *membership.Goodput
	var acc membership.Account
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		st, err := r.client.Status(ctx, "goodput")
		g = st.Goodput
		if err != nil || g == nil || g.Generation != 2 || !g.FirstClassed || g.Now != membership.CauseTraining {
			return false
		}
		now := time.Now()
		acc = g.At(now)
		return now.Sub(g.AsOf).Seconds() > g.Owed
	}, 2*time.Minute, 20*time.Millisecond, "no account of generation 2 training:\n%s", r.out)
	assert.InDelta(t, g.AsOf.Sub(g.Since).Seconds(), g.Total.Wall(), 1e-6, "the causes add up to the wall time")
	assert.Equal(t, int64(25), g.Furthest, "the furthest step named, from the stop's acks")
	require.Positive(t, g.StepTime, "the step time of generation 1, from its first and last steps")
	assert.InDelta(t, 4*time.Duration(g.StepTime).Seconds(), acc.Total.Redone, 1e-6, "steps 22 to 25 trained again: %+v", g)
	assert.Positive(t, acc.Total.Restarting)
	assert.Zero(t, acc.Total.Hung)

	code, stdout, stderr := cli(t, nil, "status", "--etcd-endpoints", r.endpoint, "--job", "goodput", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var st goodputStatus
	require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
	require.NotNil(t, st.Goodput, stdout)
	assert.Equal(t, "training", st.Goodput.Now)
	assert.Positive(t, st.Goodput.LostSeconds["redone"])
	assert.Positive(t, st.Goodput.LostSeconds["restarting"])
	assert.Less(t, st.Goodput.Ratio, 1.0)
	assert.InDelta(t, st.Goodput.WallSeconds, st.Goodput.LastHour.WallSeconds, 0.01, "a job younger than an hour")
	code, stdout, stderr = cli(t, nil, "status", "--etcd-endpoints", r.endpoint, "--job", "goodput")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `(?m)^Goodput: \d+\.\d% of \S+ \(lost starting \S+, restarting \S+, .*redone \S+\); now training$`, stdout)
	code, stdout, stderr = cli(t, nil, "jobs", "--etcd-endpoints", r.endpoint)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `(?m)^goodput\s+Running\s+2\s.*\s\d+\.\d%\s`, stdout)
}
