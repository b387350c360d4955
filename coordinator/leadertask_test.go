package coordinator_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/coordinator"
)

// recordingTask notes which replica runs it; it fails its first run.
type recordingTask struct {
	replica string
	mu      *sync.Mutex
	running map[string]bool
	starts  atomic.Int32
}

func (r *recordingTask) Lead(ctx context.Context) error {
	if r.starts.Add(1) == 1 {
		return errors.New("first start fails")
	}
	r.mu.Lock()
	r.running[r.replica] = true
	r.mu.Unlock()
	<-ctx.Done()
	r.mu.Lock()
	delete(r.running, r.replica)
	r.mu.Unlock()
	return nil
}

func TestLeaderTasksRunOnTheLeaderOnly(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	running := map[string]bool{}
	task := func(id string) *recordingTask { return &recordingTask{replica: id, mu: &mu, running: running} }
	runningNow := func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]bool{}
		for k, v := range running {
			out[k] = v
		}
		return out
	}
	c1 := h.startCoordinator("c1", func(c *coordinator.Config) { c.LeaderTasks = []coordinator.LeaderTask{task("c1")} })
	waitLeader(t, c1)
	h.startCoordinator("c2", func(c *coordinator.Config) { c.LeaderTasks = []coordinator.LeaderTask{task("c2")} })

	require.Eventually(t, func() bool { return runningNow()["c1"] }, 20*time.Second, 5*time.Millisecond,
		"the leader's task runs, started again after it failed")
	assert.Equal(t, map[string]bool{"c1": true}, runningNow(), "only the leader runs it")

	c1.Stop()
	require.Eventually(t, func() bool {
		now := runningNow()
		return now["c2"] && !now["c1"]
	}, 20*time.Second, 5*time.Millisecond, "the task moves with the lead")
}
