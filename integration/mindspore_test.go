package integration

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
)

// TestAMindSporeSchedulerOutsideKubernetes runs a scheduler node (`sidecar
// --role scheduler`, which puts a scheduler in the job's spec) and two
// workers (`--schedulers 1`) against etcd: every process gets MindSpore's
// variables, MS_SCHED_HOST and MS_SCHED_PORT naming the scheduler's node
// and port.
func TestAMindSporeSchedulerOutsideKubernetes(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	etcd := []string{"--etcd-endpoints", srv.Endpoint()}
	background(t, nil, append([]string{"serve", "--listen-metrics", "127.0.0.1:0"}, etcd...)...)
	dir := t.TempDir()
	// Written whole, then renamed: a reader never sees half of it.
	trainer := []string{"--", "/bin/sh", "-c", `env >"$0/.env-$ELASTIC_ROLE-$ELASTIC_RANK" && mv "$0/.env-$ELASTIC_ROLE-$ELASTIC_RANK" "$0/env-$ELASTIC_ROLE-$ELASTIC_RANK" && exec sleep 1000`, dir}
	schedPort := freePort(t)
	node := func(id string, args ...string) {
		base := []string{"sidecar", "--job", "ms", "--np", "2", "--node-id", id, "--host", "127.0.0.1", "--master-port", freePort(t)}
		background(t, nil, append(append(append(base, etcd...), args...), trainer...)...)
	}
	node("sched", "--role", "scheduler", "--port", schedPort)
	node("w0", "--schedulers", "1", "--port", freePort(t))
	node("w1", "--schedulers", "1", "--port", freePort(t))

	read := func(name string) map[string]string {
		env, _ := readEnvFile(filepath.Join(dir, name))
		return env
	}
	require.Eventually(t, func() bool {
		return read("env-scheduler-0") != nil && read("env-worker-0") != nil && read("env-worker-1") != nil
	}, 60*time.Second, 50*time.Millisecond, "the scheduler and the workers never all started")
	sched := read("env-scheduler-0")
	assert.Equal(t, "MS_SCHED", sched["MS_ROLE"])
	assert.NotContains(t, sched, "RANK", "a scheduler node is MindSpore's alone: no worker's variables")
	assert.NotContains(t, sched, "MS_NODE_ID")
	for _, w := range []string{"env-worker-0", "env-worker-1"} {
		env := read(w)
		assert.Equal(t, "MS_WORKER", env["MS_ROLE"])
		assert.Equal(t, "127.0.0.1", env["MS_SCHED_HOST"])
		assert.Equal(t, schedPort, env["MS_SCHED_PORT"], "the scheduler's port, not the master's")
		assert.Equal(t, "2", env["MS_WORKER_NUM"])
	}
}
