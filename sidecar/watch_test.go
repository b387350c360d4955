package sidecar_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/simnode"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
	"github.com/elastictraining/coordinator/sidecar"
)

// watching is a simulated workload whose watch the test speaks for.
type watching struct {
	*simnode.Workload
	obs chan sidecar.Observation
}

var _ sidecar.Watcher = watching{}

func (w watching) Observations() <-chan sidecar.Observation { return w.obs }

func (w watching) StopStacks(ctx context.Context) error { return w.Kill(ctx) }

// The guard's first progress report comes with a generation's first step,
// before any rank has a step time. The node's record is written from the
// first report that has one: a record of "0s a step" would stand in
// status until the next write, seconds later. The metric, likewise, has
// no sample for a rank without a step time.
func TestAgentShowsProgressOnceARankHasAStepTime(t *testing.T) {
	srv := etcdtest.Start(t)
	keys := membership.DefaultKeys()
	spec := membership.DefaultSpec(membership.NP{Min: 1, Max: 1})
	w := watching{Workload: simnode.NewWorkload(), obs: make(chan sidecar.Observation)}
	metrics := sidecar.NewMetrics("job", "n0")
	agent, err := sidecar.New(sidecar.Config{
		Place: presence.Place{Client: srv.Client(t), Keys: keys, Job: "job", TTL: 2 * time.Second,
			Node: membership.Node{ID: "n0", Role: membership.RoleWorker, Host: "127.0.0.1", Ports: []int{20001}, NProc: 1, MasterPort: 20000}},
		Spec: &spec, Workload: w, Observer: metrics,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = agent.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.Eventually(t, func() bool { return agent.Registration() != nil }, 10*time.Second, time.Millisecond)
	f := &fixture{t: t, srv: srv, keys: keys}
	f.putPlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{f.member(int64(agent.Registration().Lease()))},
		WorldSize: 1, Master: "127.0.0.1:20000"})
	f.record("acked running 1", func(n membership.Node) bool { return n.State == membership.NodeRunning && n.Generation == 1 })

	// Unbuffered: each is taken by the agent before the next is sent.
	w.obs <- sidecar.Observation{Generation: 1, Steps: []membership.RankProgress{{Rank: 0, Step: 1}}}
	w.obs <- sidecar.Observation{Generation: 1, Steps: []membership.RankProgress{{Rank: 0, Step: 1}}}
	assert.Empty(t, stepSamples(t, metrics), "no sample before a step time")

	stepping := membership.RankProgress{Rank: 0, Step: 20, StepTime: membership.Duration(50 * time.Millisecond), HangTimeout: membership.Duration(5 * time.Second)}
	w.obs <- sidecar.Observation{Generation: 1, Steps: []membership.RankProgress{stepping}}
	n := f.record("showed its progress", func(n membership.Node) bool { return n.Progress != nil })
	assert.Equal(t, stepping, *n.Progress, "the first progress written is the first with a step time")
	assert.Equal(t, []string{`elastic_rank_step_seconds{job="job",node="n0",rank="0"} 0.05`}, stepSamples(t, metrics))
}

// stepSamples are the samples of elastic_rank_step_seconds.
func stepSamples(t *testing.T, m *sidecar.Metrics) []string {
	var text strings.Builder
	require.NoError(t, m.Write(&text))
	return regexp.MustCompile(`(?m)^elastic_rank_step_seconds\{.*$`).FindAllString(text.String(), -1)
}

// A rank's hang goes into the node's record with its global rank; a
// quiet phase one of the node's ranks declared goes there too; and a rank
// reported hung that steps again (waiting for a peer's declared phase, not
// hung) withdraws the report, after which it may be reported again.
func TestAgentReportsAHangAndWithdrawsIt(t *testing.T) {
	srv := etcdtest.Start(t)
	keys := membership.DefaultKeys()
	spec := membership.DefaultSpec(membership.NP{Min: 1, Max: 1})
	w := watching{Workload: simnode.NewWorkload(), obs: make(chan sidecar.Observation)}
	agent, err := sidecar.New(sidecar.Config{
		Place: presence.Place{Client: srv.Client(t), Keys: keys, Job: "job", TTL: 2 * time.Second,
			Node: membership.Node{ID: "n0", Role: membership.RoleWorker, Host: "127.0.0.1", Ports: []int{20001}, NProc: 1, MasterPort: 20000}},
		Spec: &spec, Workload: w,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = agent.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.Eventually(t, func() bool { return agent.Registration() != nil }, 10*time.Second, time.Millisecond)
	f := &fixture{t: t, srv: srv, keys: keys}
	member := f.member(int64(agent.Registration().Lease()))
	member.GlobalRank = 3
	f.putPlan(membership.Plan{Generation: 1, Phase: membership.PhaseRun, Members: []membership.Member{member}, WorldSize: 4, Master: "127.0.0.1:20000"})
	f.record("acked running 1", func(n membership.Node) bool { return n.State == membership.NodeRunning && n.Generation == 1 })

	hang := membership.Hang{Generation: 1, Rank: 0, Step: 41, Quiet: membership.Duration(5 * time.Second), Timeout: membership.Duration(5 * time.Second)}
	w.obs <- sidecar.Observation{Generation: 1, Hung: &hang}
	n := f.record("reported the hang", func(n membership.Node) bool { return n.Hang != nil })
	assert.Equal(t, 3, n.Hang.Rank, "the rank is global")
	assert.Equal(t, int64(41), n.Hang.Step)

	// Still hung: the report stands, and a quiet phase of the node is
	// written whatever its ranks do.
	quiet := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	still := membership.RankProgress{Rank: 0, Step: 41, StepTime: membership.Duration(20 * time.Millisecond)}
	w.obs <- sidecar.Observation{Generation: 1, Steps: []membership.RankProgress{still}, QuietUntil: quiet}
	n = f.record("wrote the quiet phase", func(n membership.Node) bool { return n.QuietUntil.Equal(quiet) })
	require.NotNil(t, n.Hang, "a rank not stepping keeps its report")

	// It steps again: the report goes.
	w.obs <- sidecar.Observation{Generation: 1, Steps: []membership.RankProgress{{Rank: 0, Step: 42, StepTime: still.StepTime}}, Stepping: []int{0}, QuietUntil: quiet}
	f.record("withdrew the hang", func(n membership.Node) bool { return n.Hang == nil })

	// And a later hang of the generation is reported anew.
	again := hang
	again.Step = 90
	w.obs <- sidecar.Observation{Generation: 1, Hung: &again}
	n = f.record("reported the second hang", func(n membership.Node) bool { return n.Hang != nil })
	assert.Equal(t, int64(90), n.Hang.Step)

	// A report of a generation that is over changes nothing.
	w.obs <- sidecar.Observation{Generation: 0, Steps: []membership.RankProgress{still}, Stepping: []int{0}}
	w.obs <- sidecar.Observation{Generation: 1, Steps: []membership.RankProgress{still}} // taken after the one before
	n = f.record("kept the second hang", func(n membership.Node) bool { return n.Hang != nil })
	assert.Equal(t, int64(90), n.Hang.Step)
}
