package presence_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

func TestFollowRelistsWhenCompactedPast(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	_, err := cli.Put(t.Context(), "/p/a", "1")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	updates := make(chan presence.Update, 16)
	first := true
	done := make(chan error, 1)
	go func() {
		done <- presence.Follow(ctx, cli, presence.Range{Key: "/p/", Prefix: true}, nil, func(u presence.Update) error {
			if first {
				// Before the watch starts, the store moves on and is
				// compacted past the listing.
				first = false
				if _, err := cli.Put(ctx, "/p/b", "2"); err != nil {
					return err
				}
				resp, err := cli.Put(ctx, "/p/a", "3")
				if err != nil {
					return err
				}
				if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
					return err
				}
			}
			updates <- u
			return nil
		})
	}()
	u := <-updates
	require.True(t, u.Reset)
	require.Len(t, u.Changes, 1)

	u = <-updates
	require.True(t, u.Reset, "a compacted watch lists again")
	got := map[string]string{}
	for _, kv := range u.Changes {
		got[kv.Key] = string(kv.Value)
	}
	assert.Equal(t, map[string]string{"/p/a": "3", "/p/b": "2"}, got, "nothing was missed")
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

func TestFollowRejectsPrefixWithoutSlash(t *testing.T) {
	srv := etcdtest.Start(t)
	err := presence.Follow(t.Context(), srv.Client(t), presence.Range{Key: "/elastic/jobs/a", Prefix: true}, nil, nil)
	assert.ErrorContains(t, err, "must end in '/'")
}

func TestWatchNodesDeliversCompleteSets(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	keys := membership.DefaultKeys()
	ctx, cancel := context.WithCancel(t.Context())
	sets, err := presence.WatchNodes(ctx, cli, keys, "job", nil)
	require.NoError(t, err)

	var regs []*presence.Registration
	for i := range 5 {
		reg, err := presence.Register(t.Context(), presence.RegistrationConfig{
			Place: presence.Place{Client: cli, Keys: keys, Job: "job", Node: testNode(fmt.Sprintf("n%d", i)), TTL: 5 * time.Second},
		})
		require.NoError(t, err)
		regs = append(regs, reg)
	}
	// A node of job "jobx" and a malformed record must not be mistaken for
	// members.
	other, err := presence.Register(t.Context(), presence.RegistrationConfig{
		Place: presence.Place{Client: cli, Keys: keys, Job: "jobx", Node: testNode("x"), TTL: 5 * time.Second},
	})
	require.NoError(t, err)
	t.Cleanup(other.Close)
	_, err = cli.Put(t.Context(), keys.Node("job", "junk"), "{")
	require.NoError(t, err)
	require.NoError(t, regs[2].Leave(t.Context()))

	want := []string{"n0", "n1", "n3", "n4"}
	var last presence.NodeSet
	require.Eventually(t, func() bool {
		select {
		case last = <-sets:
		default:
		}
		return len(last.Nodes) == 4 && len(last.Invalid) == 1
	}, 10*time.Second, time.Millisecond)
	var got []string
	for _, n := range last.Nodes {
		got = append(got, n.ID)
	}
	assert.Equal(t, want, got, "in join order")
	assert.Equal(t, keys.Node("job", "junk"), last.Invalid[0].Key)

	cancel()
	for range sets {
	}
	for _, r := range regs {
		r.Close()
	}
}
