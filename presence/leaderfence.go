package presence

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

type leaderFenceKey struct{}

// WithLeaderFence gives ctx the comparison that holds while this replica
// leads (its election key unchanged). The coordinator hands it to its
// leader tasks, so that a deposed leader, frozen and thawed with a stale
// view, cannot write over the new leader's work.
func WithLeaderFence(ctx context.Context, fence clientv3.Cmp) context.Context {
	return context.WithValue(ctx, leaderFenceKey{}, fence)
}

// LeaderFence returns the comparison of WithLeaderFence, if ctx has one.
func LeaderFence(ctx context.Context) (clientv3.Cmp, bool) {
	fence, ok := ctx.Value(leaderFenceKey{}).(clientv3.Cmp)
	return fence, ok
}
