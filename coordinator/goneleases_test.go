package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A revocation that returns after the node itself revoked the lease must
// not push back the time the lease was first seen gone.
func TestTheEarliestSightOfAGoneLeaseStands(t *testing.T) {
	g := newGoneLeases()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g.set("job", 7, t0)
	g.set("job", 7, t0.Add(3*time.Second))
	at, ok := g.get("job", 7)
	assert.True(t, ok)
	assert.Equal(t, t0, at)
	g.set("job", 7, t0.Add(-time.Second))
	at, _ = g.get("job", 7)
	assert.Equal(t, t0.Add(-time.Second), at)
}
