package integration

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/membership"
)

// TestAMalformedRecordNeverStopsARunningJob writes, through a plain etcd
// client as etcdctl would, garbage and invalid values over each record a
// running job has (spec, plan, rank table, status, a node's record, an
// eviction and a takeover record), then a valid value. Through all of it
// the same trainer processes run in the same generation; the status says
// what is wrong, with an event and elastic_malformed_records, within a
// second or so; the plan and the table are put back; and a valid value
// written afterwards is followed.
func TestAMalformedRecordNeverStopsARunningJob(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "bad")
	srv := c.serve()
	var nodes []*clusterNode
	for i := range 3 {
		nodes = append(nodes, c.sidecar(fmt.Sprintf("n%d", i), []string{"FT_BEAT=0.05"}, "--np", "3"))
	}
	st := c.running(1, 3)
	c.waitStarts(1, 3)
	var trainers []int
	for _, n := range nodes {
		trainers = append(trainers, trainerOf(t, c, n))
	}
	var metricsURL string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`metrics=(http://\S+/metrics)`).FindStringSubmatch(srv.out.String())
		if m != nil {
			metricsURL = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond)
	keys := membership.DefaultKeys()
	ctx := t.Context()
	put := func(key, value string, opts ...clientv3.OpOption) {
		t.Helper()
		_, err := c.cli.Put(ctx, key, value, opts...)
		require.NoError(t, err)
	}
	get := func(key string) (string, int64) {
		t.Helper()
		resp, err := c.cli.Get(ctx, key)
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1, key)
		return string(resp.Kvs[0].Value), resp.Kvs[0].Lease
	}
	malformedMetric := func(kind string) string {
		resp, err := http.Get(metricsURL)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^elastic_malformed_records\{job="bad",kind="` + kind + `"\} (\S+)$`).FindStringSubmatch(string(body))
		if m == nil {
			return ""
		}
		return m[1]
	}
	hasEvent := func(typ, contains string) bool {
		events, err := c.client.Events(ctx, "bad")
		if err != nil {
			return false
		}
		for _, e := range events {
			if e.Type == typ && strings.Contains(e.Message, contains) {
				return true
			}
		}
		return false
	}
	// steady checks that the job runs on as it did: same generation, the
	// same trainer processes alive.
	steady := func(what string) {
		t.Helper()
		s, err := c.client.Status(ctx, "bad")
		require.NoError(t, err, what)
		assert.Equal(t, membership.JobRunning, s.Phase, "%s: %s", what, s.Message)
		assert.Equal(t, st.Generation, s.Generation, "%s: the generation changed", what)
		for i, pid := range trainers {
			assert.True(t, proctest.Alive(pid), "%s: the trainer of n%d (pid %d) is gone", what, i, pid)
		}
	}
	// said waits for the status and the metric to say a record of kind is
	// malformed, and an event to say what.
	said := func(what, kind string) {
		t.Helper()
		require.Eventually(t, func() bool {
			s, err := c.client.Status(ctx, "bad")
			return err == nil && strings.Contains(s.Malformed, kind) && malformedMetric(kind) == "1" && hasEvent("MalformedRecord", "")
		}, 5*time.Second, 10*time.Millisecond, "%s: not said in the status, the metric and an event", what)
	}
	cleared := func(what, kind string) {
		t.Helper()
		require.Eventually(t, func() bool {
			s, err := c.client.Status(ctx, "bad")
			return err == nil && !strings.Contains(s.Malformed, kind) && malformedMetric(kind) == "0"
		}, 5*time.Second, 10*time.Millisecond, "%s: still said after a valid value", what)
	}

	// The spec: garbage, then values that decode but cannot be.
	goodSpec, _ := get(keys.Spec("bad"))
	for _, bad := range []string{"not json {", `{"np": "-3"}`, `{"np": "0"}`, `{"np": "5:2"}`} {
		put(keys.Spec("bad"), bad)
		said("spec "+bad, "spec")
		steady("spec " + bad)
	}
	put(keys.Spec("bad"), goodSpec)
	cleared("the spec again", "spec")
	steady("the spec again")

	// The plan and its rank table: put back by the coordinator.
	goodPlan, _ := get(keys.Plan("bad"))
	plan, err := membership.DecodePlan([]byte(goodPlan))
	require.NoError(t, err)
	put(keys.Plan("bad"), `{"generation": "two"`)
	require.Eventually(t, func() bool {
		v, _ := get(keys.Plan("bad"))
		return v == goodPlan && hasEvent("PlanRestored", "")
	}, 5*time.Second, 10*time.Millisecond, "the last good plan was not put back")
	steady("a malformed plan")
	require.NotNil(t, plan.Table)
	chunk := keys.TableChunk("bad", plan.Table.Generation, 0)
	goodChunk, _ := get(chunk)
	put(chunk, "\x00\xffnot a table")
	require.Eventually(t, func() bool {
		v, _ := get(chunk)
		return v == goodChunk && hasEvent("TableRestored", "")
	}, 5*time.Second, 10*time.Millisecond, "the last good rank table was not put back")
	steady("a malformed rank table")

	// The status: written over.
	put(keys.Status("bad"), "{{{")
	require.Eventually(t, func() bool {
		_, err := c.client.Status(ctx, "bad")
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "the malformed status was not written over")
	steady("a malformed status")

	// A node's record, put without its lease as etcdctl does: its last
	// good record stands while its lease lives; the valid one is back.
	goodNode, lease := get(keys.Node("bad", "n1"))
	put(keys.Node("bad", "n1"), "garbage")
	said("a node's record", "node")
	steady("a node's record")
	put(keys.Node("bad", "n1"), goodNode, clientv3.WithLease(clientv3.LeaseID(lease)))
	cleared("the node's record again", "node")
	steady("the node's record again")

	// An eviction and a takeover record that do not decode.
	for kind, key := range map[string]string{"eviction": keys.Eviction("bad", "n2", 0x1234), "takeover": keys.Takeover("bad", "n2", 0x1234)} {
		put(key, "{not json")
		said("a malformed "+kind, kind)
		steady("a malformed " + kind)
		_, err := c.cli.Delete(ctx, key)
		require.NoError(t, err)
		cleared("the "+kind+" deleted", kind)
	}

	// The Kubernetes bridge's and the autoscaler's reports are theirs:
	// garbage there changes nothing of the job.
	for kind, key := range map[string]string{"bridge": keys.Bridge("bad"), "autoscaler": keys.Autoscaler("bad")} {
		put(key, "{not json")
		said("a malformed "+kind+" report", kind)
		steady("a malformed " + kind + " report")
		_, err := c.cli.Delete(ctx, key)
		require.NoError(t, err)
		cleared("the "+kind+" report deleted", kind)
	}

	// With no coordinator to put it back, a malformed plan leaves the
	// sidecars running what they run.
	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-srv.done:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	put(keys.Plan("bad"), "garbage")
	time.Sleep(3 * time.Second)
	for i, pid := range trainers {
		assert.True(t, proctest.Alive(pid), "the trainer of n%d stopped at a malformed plan", i)
	}
	// The fence still fires while the plan cannot be read: n2 cut off
	// from etcd kills its trainer within its lease.
	nodes[2].proxy.Cut()
	require.Eventually(t, func() bool { return !proctest.Alive(trainers[2]) }, 15*time.Second, 10*time.Millisecond,
		"a node cut off while its plan was malformed kept its trainer")
	nodes[2].proxy.Heal()
	trainers = trainers[:2]
	srv = c.serve()
	require.Eventually(t, func() bool {
		s, err := c.client.Status(ctx, "bad")
		return err == nil && strings.Contains(s.Message, "plan cannot be read") && strings.Contains(s.Malformed, "plan")
	}, 30*time.Second, 10*time.Millisecond, "a coordinator that finds only a malformed plan does not say so:\n%s", srv.out)
	for i, pid := range trainers {
		assert.True(t, proctest.Alive(pid), "the trainer of n%d stopped at a malformed plan", i)
	}
	// A valid plan written back is followed: the cut-off node's loss
	// restarts the job, once, with the node back.
	put(keys.Plan("bad"), goodPlan)
	c.running(st.Generation+1, 3)
	// And so is a change of spec.
	_, err = c.client.Scale(ctx, "bad", membership.FixedNP(2))
	require.NoError(t, err)
	c.running(st.Generation+2, 2)
}

// TestScaleRepairsAMalformedSpec writes garbage, then np -3, over a running
// job's spec with a plain etcd client; the job runs on under its last good
// spec, and `coordinator scale --np 3` then takes it to three nodes,
// writing the last good spec with the new np and saying in one line that it
// replaced a malformed value.
func TestScaleRepairsAMalformedSpec(t *testing.T) {
	t.Parallel()
	c := newJobCluster(t, "repair")
	c.serve()
	for i := range 3 {
		c.sidecar(fmt.Sprintf("n%d", i), []string{"FT_BEAT=0.05"}, "--np", "2", "--max-restarts", "9")
	}
	st := c.running(1, 2)
	ctx := t.Context()
	// Each bad value is seen: the status says what is wrong with it.
	for _, w := range []struct{ bad, why string }{{"\x00garbage {", "invalid character"}, {`{"np": -3, "maxRestarts": 9}`, `invalid np "-3"`}} {
		bad, why := w.bad, w.why
		_, err := c.cli.Put(ctx, membership.DefaultKeys().Spec("repair"), bad)
		require.NoError(t, err)
		said := c.status("said its spec malformed", func(s membership.Status) bool { return strings.Contains(s.Malformed, why) })
		assert.Equal(t, st.Generation, said.Generation, "spec %q: the job runs on", bad)
	}

	code, stdout, stderr := cli(t, nil, "scale", "--etcd-endpoints", c.etcdURL, "--job", "repair", "--np", "3", "--wait", "--timeout", "60s")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Regexp(t, `^job repair: the stored spec was malformed \(.*np.*\); replaced it with the last good spec and np 3\n$`, stderr)
	assert.Contains(t, stdout, "job repair: np 2 → 3\n")
	assert.Contains(t, stdout, "job repair runs at np 3")

	c.running(st.Generation+1, 3)
	spec, err := c.client.Spec(ctx, "repair")
	require.NoError(t, err, "the stored spec is good again")
	assert.Equal(t, membership.FixedNP(3), spec.NP)
	assert.Equal(t, 9, spec.MaxRestarts, "the rest of the spec is the last good one's")
	c.status("no longer said malformed", func(s membership.Status) bool { return s.Malformed == "" })
}
