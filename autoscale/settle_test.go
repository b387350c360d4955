package autoscale_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/autoscale"
)

func planOf(ds ...autoscale.Decision) autoscale.Plan {
	return autoscale.Plan{Decisions: ds, HeldBack: map[string]string{}}
}

func TestGrowthWaitsUntilTheRoomStopsChanging(t *testing.T) {
	s := autoscale.NewSettler(time.Second, 10*time.Second)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

	// Room appears over 600 ms as another workload's pods go: each pass
	// sees a bigger growth, and none is carried out.
	for i, to := range []int{4, 9, 12, 12} {
		plan := planOf(autoscale.Decision{Job: "a", From: 2, To: to})
		act, wake := s.Filter(plan, ms(200*i))
		assert.Empty(t, act, "pass %d", i)
		assert.Contains(t, plan.HeldBack["a"], "waits until the room settles")
		assert.Equal(t, ms(200*min(i, 2)+1000), wake, "a second after the last change, at pass %d", i)
	}
	// A second after the last change: one step to all of it.
	act, wake := s.Filter(planOf(autoscale.Decision{Job: "a", From: 2, To: 12}), ms(1400))
	assert.Equal(t, []autoscale.Decision{{Job: "a", From: 2, To: 12}}, act)
	assert.True(t, wake.IsZero())
}

func TestUrgentDecisionsPassAtOnceAndTheRestWaitsAtMostMaxSettle(t *testing.T) {
	s := autoscale.NewSettler(time.Second, 3*time.Second)
	shrink := autoscale.Decision{Job: "b", From: 10, To: 6, Urgent: true, Reason: "room for pending pod nginx"}
	for i := range 6 {
		// The room never settles: the growth changes at every pass.
		plan := planOf(shrink, autoscale.Decision{Job: "a", From: 2, To: 3 + i})
		act, _ := s.Filter(plan, t0.Add(time.Duration(i)*700*time.Millisecond))
		assert.Contains(t, act, shrink, "pass %d", i)
		grown := len(act) == 2
		assert.Equal(t, i == 5, grown, "pass %d: held until 3 s after it first appeared", i)
	}
}

func TestWithoutASettleNothingWaits(t *testing.T) {
	s := autoscale.NewSettler(0, 0)
	act, wake := s.Filter(planOf(autoscale.Decision{Job: "a", From: 2, To: 5}), t0)
	assert.Len(t, act, 1)
	assert.True(t, wake.IsZero())
}

func TestSmallMovesOfAWaitingGrowthDoNotHoldItBack(t *testing.T) {
	s := autoscale.NewSettler(time.Second, 10*time.Second)
	// 30, then 32, 29, 31 as the scheduler places other pods a little
	// differently from the simulation: within a tenth, the same growth.
	for i, to := range []int{30, 32, 29, 31} {
		act, wake := s.Filter(planOf(autoscale.Decision{Job: "a", From: 2, To: to}), t0.Add(time.Duration(i)*200*time.Millisecond))
		assert.Empty(t, act)
		assert.Equal(t, t0.Add(time.Second), wake, "pass %d", i)
	}
	act, _ := s.Filter(planOf(autoscale.Decision{Job: "a", From: 2, To: 31}), t0.Add(time.Second))
	assert.Equal(t, []autoscale.Decision{{Job: "a", From: 2, To: 31}}, act, "the growth as it is when it is due")
}

func TestAGrowthThatComesAndGoesIsCarriedOutWithinMaxSettle(t *testing.T) {
	s := autoscale.NewSettler(time.Second, 3*time.Second)
	var applied bool
	for i := range 20 {
		now := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		plan := planOf()
		if i%2 == 0 { // room taken and given back at every other pass
			plan = planOf(autoscale.Decision{Job: "a", From: 2, To: 8})
		}
		act, _ := s.Filter(plan, now)
		if len(act) > 0 {
			applied = true
			assert.GreaterOrEqual(t, now.Sub(t0), time.Second, "not before the settle")
			assert.LessOrEqual(t, now.Sub(t0), 3*time.Second, "within maxSettle")
			break
		}
	}
	assert.True(t, applied, "a growth that flickers is carried out within maxSettle")
}
