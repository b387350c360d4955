package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/membership"
)

// TestAboveFourRanksRunShowsRankZeroAndFilesKeepEveryRank: `run` at 6
// ranks shows rank 0's output and the coordinator's lines, says where the
// rest went, and log/NODE/rank-R.log holds every rank's output, each
// generation after a line naming it.
func TestAboveFourRanksRunShowsRankZeroAndFilesKeepEveryRank(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := startRunIn(t, dir, []string{"--np", "6", "--job", "logs"}, []string{filepath.Join(repoRoot, "testdata/toytrainer.sh")},
		"TOY_STEPS=30", "TOY_INTERVAL=0.1")
	first := r.startsOf(1, 6)
	require.NoError(t, syscall.Kill(first[3].pid, syscall.SIGKILL))
	r.startsOf(2, 6)
	require.Equal(t, 0, r.wait())

	out := r.out.String()
	assert.Contains(t, out, "coordinator run: 6 processes: the terminal shows rank 0's output; every rank's is in log/NODE/rank-R.log")
	assert.Contains(t, out, "coordinator run: generation 2 running: 6 nodes")
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "[") {
			assert.True(t, strings.HasPrefix(line, "[rank 0] "), "only rank 0 on the terminal: %q", line)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "log", "logs-*", "rank-*.log"))
	require.NoError(t, err)
	var all strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		rank := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "rank-"), ".log")
		assert.Contains(t, string(data), "worker rank "+rank+" of 6", "%s holds rank %s's output", f, rank)
		all.Write(data)
	}
	text := all.String()
	for rank := range 6 {
		for gen := 1; gen <= 2; gen++ {
			assert.Regexp(t, regexp.MustCompile(`==== generation `+itoa(gen)+`: worker rank `+itoa(rank)+` of 6 \(node rank \d+, local rank 0\), \S+ ====`), text)
		}
		assert.Contains(t, text, "rank "+itoa(rank)+" of 6 (generation 2")
	}
	assert.Contains(t, text, "==== killed by signal 9 (killed) ====", "the killed trainer's file says so")
	assert.Contains(t, text, "==== exited with code 0 ====")
}

// TestLogDirWithTeeNoneKeepsTheTerminalQuiet: --log-dir and --tee none
// at 2 ranks: nothing of the trainers on the terminal, all in the files.
func TestLogDirWithTeeNoneKeepsTheTerminalQuiet(t *testing.T) {
	t.Parallel()
	logs := t.TempDir()
	r := startRun(t, []string{"--np", "2", "--job", "quiet", "--log-dir", logs, "--tee", "none"}, toy, "TOY_STEPS=3", "TOY_INTERVAL=0.05")
	require.Equal(t, 0, r.wait())
	assert.NotContains(t, r.out.String(), "[rank")
	assert.Contains(t, r.out.String(), "2 processes: the terminal shows no rank's output; every rank's is in "+filepath.Join(logs, "NODE", "rank-R.log"))
	for rank, f := range []string{"quiet-0/rank-0.log", "quiet-1/rank-1.log"} {
		data, err := os.ReadFile(filepath.Join(logs, f))
		require.NoError(t, err, "ranks are by join order, node 0 first")
		assert.Contains(t, string(data), "rank "+itoa(rank)+": done")
	}
}

// TestJobsAreObjects: an unknown job is not created by a scale; jobs lists
// them; delete refuses a running job, ends it with --force, and a finished
// job expires after serve's retention.
func TestJobsAreObjects(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	etcd := []string{"--etcd-endpoints", srv.Endpoint()}
	background(t, nil, append([]string{"serve", "--listen-metrics", "127.0.0.1:0", "--finished-job-retention", "3s"}, etcd...)...)

	code, _, stderr := cli(t, nil, append([]string{"scale", "--job", "tpyo", "--np", "2"}, etcd...)...)
	assert.Equal(t, 1, code)
	assert.Equal(t, "coordinator scale: job tpyo does not exist (no spec, node or status under /elastic/jobs/tpyo/); check --job, or add --create to start it\n", stderr)
	code, stdout, _ := cli(t, nil, append([]string{"jobs"}, etcd...)...)
	require.Equal(t, 0, code)
	assert.Equal(t, "No jobs.\n", stdout, "the typo created nothing")

	code, stdout, stderr = cli(t, nil, append([]string{"scale", "--job", "long", "--np", "1", "--create"}, etcd...)...)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "job long: np 1\n", stdout)
	toyEnv := func(steps string) []string {
		return []string{"TOY_DIR=" + t.TempDir(), "TOY_STEPS=" + steps, "TOY_INTERVAL=0.1"}
	}
	long := background(t, toyEnv("1000"), append([]string{"sidecar", "--job", "long", "--host", "127.0.0.1", "--port", freePort(t), "--master-port", freePort(t)},
		append(etcd, "--", "testdata/toytrainer.sh")...)...)
	short := background(t, toyEnv("2"), append([]string{"sidecar", "--job", "short", "--np", "1", "--host", "127.0.0.1", "--port", freePort(t), "--master-port", freePort(t)},
		append(etcd, "--", "testdata/toytrainer.sh")...)...)
	require.Equal(t, 0, short.wait(t))

	var table string
	require.Eventually(t, func() bool {
		_, table, _ = cli(t, nil, append([]string{"jobs"}, etcd...)...)
		return regexp.MustCompile(`(?m)^long\s+Running\s+1\s+1\s+1/1\s+1\s+0\s+(\d+\.\d%|-)\s+\d+s$`).MatchString(table)
	}, 30*time.Second, 50*time.Millisecond, "jobs lists the running job:\n%s", &table)
	assert.Regexp(t, `(?m)^JOB\s+PHASE\s+GENERATION\s+NP\s+READY\s+NODES\s+RESTARTS\s+GOODPUT\s+AGE$`, table)

	// The finished job expires after the retention.
	require.Eventually(t, func() bool {
		_, table, _ = cli(t, nil, append([]string{"jobs"}, etcd...)...)
		return !strings.Contains(table, "short")
	}, 30*time.Second, 100*time.Millisecond, "the finished job is deleted after 3s:\n%s", &table)

	code, _, stderr = cli(t, nil, append([]string{"delete", "--job", "long"}, etcd...)...)
	assert.Equal(t, 1, code)
	assert.Equal(t, "coordinator delete: job long is Running (generation 1, 1 of 1 member ready): it has not ended; wait for it, or add --force to end it first\n", stderr)
	code, stdout, stderr = cli(t, nil, append([]string{"delete", "--job", "long", "--force"}, etcd...)...)
	require.Equal(t, 0, code, stderr)
	assert.True(t, strings.HasPrefix(stdout, "job long is Running: asking the coordinator to end it\n"), stdout)
	assert.True(t, strings.HasSuffix(stdout, "job long (Failed) deleted\n"), stdout)
	assert.Equal(t, 1, long.wait(t), "the sidecar ends with the job")
	assert.Contains(t, long.out.String(), "job long failed: cancelled: deleted with coordinator delete --force")
	resp, err := srv.Client(t).Get(t.Context(), "/elastic/jobs/", clientv3.WithPrefix())
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs, "every key of both jobs is gone")
	code, _, stderr = cli(t, nil, append([]string{"delete", "--job", "long"}, etcd...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "job long does not exist")
}

// TestDeleteWaitsForTheOldProcesses: delete --force removes a job's keys
// only once its trainers are gone, here one that ignores SIGTERM for the
// whole grace period, so that the same job created again right after
// never runs beside them.
func TestDeleteWaitsForTheOldProcesses(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	etcd := []string{"--etcd-endpoints", srv.Endpoint()}
	background(t, nil, append([]string{"serve", "--listen-metrics", "127.0.0.1:0"}, etcd...)...)
	dir := t.TempDir()
	trainer := filepath.Join(dir, "stubborn.sh")
	require.NoError(t, os.WriteFile(trainer, []byte("#!/bin/sh\ntrap '' TERM\necho $$ > \"$PID_FILE\"\nwhile :; do sleep 0.1; done\n"), 0o755))
	pidFile := filepath.Join(dir, "pid")
	background(t, []string{"PID_FILE=" + pidFile}, append([]string{"sidecar", "--job", "again", "--np", "1", "--grace-period", "3s",
		"--host", "127.0.0.1", "--port", freePort(t), "--master-port", freePort(t)}, append(etcd, "--", trainer)...)...)
	var pid int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		_, err = fmt.Sscan(string(data), &pid)
		return err == nil && pid > 0
	}, 30*time.Second, 50*time.Millisecond)

	began := time.Now()
	code, stdout, stderr := cli(t, nil, append([]string{"delete", "--job", "again", "--force"}, etcd...)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "waiting for its nodes to stop: 1 node still registered: its processes may still run\n")
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the old trainer is gone once delete returns")
	assert.GreaterOrEqual(t, time.Since(began), 2*time.Second, "delete waited out the grace period")
}

// TestEventsPrintTheTimelineAndPlotIt: events shows each generation with
// its reason and the duration of each step; --plot draws PNG and SVG.
func TestEventsPrintTheTimelineAndPlotIt(t *testing.T) {
	t.Parallel()
	r := startRun(t, []string{"--np", "2", "--job", "story"}, toy, "TOY_STEPS=40", "TOY_INTERVAL=0.1")
	first := r.startsOf(1, 2)
	require.NoError(t, syscall.Kill(first[1].pid, syscall.SIGKILL))
	r.startsOf(2, 2)
	r.status("story", "Running generation 2", func(s membership.Status) bool {
		return s.Phase == membership.JobRunning && s.Generation == 2
	})
	code, stdout, stderr := cli(t, nil, "events", "--etcd-endpoints", r.endpoint, "--job", "story")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `(?m)^TIME\s+GENERATION\s+EVENT\s+DETECT\s+STOP\s+WAIT\s+START\s+TOTAL\s+MESSAGE$`, stdout)
	assert.Regexp(t, `(?m)^\S+ \S+\s+1\s+GenerationRunning\s+0s\s+0s\s+0s\s+\d+ms\s+\d+ms\s+all 2 members running, world size 2$`, stdout)
	assert.Regexp(t, `(?m)^\S+ \S+\s+2\s+GenerationStopping\s+-\s+-\s+-\s+-\s+-\s+node story-1 \(worker rank 1\) failed with exit code 137$`, stdout)
	assert.Regexp(t, `(?m)^\S+ \S+\s+2\s+GenerationRunning(\s+\d+(\.\d+)?m?s){5}\s+all 2 members running`, stdout)

	dir := t.TempDir()
	for _, name := range []string{"story.png", "story.svg"} {
		file := filepath.Join(dir, name)
		code, stdout, stderr = cli(t, nil, "events", "--etcd-endpoints", r.endpoint, "--job", "story", "--plot", file)
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, stdout, "timeline drawn to "+file)
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		if strings.HasSuffix(name, ".png") {
			assert.Equal(t, "\x89PNG\r\n\x1a\n", string(data[:8]))
			assert.Greater(t, len(data), 10000, "a picture, not an empty canvas")
			t.Logf("timeline plot: %s (%d bytes)", file, len(data))
		} else {
			assert.Contains(t, string(data), "<svg")
			assert.Contains(t, string(data), "world size")
		}
	}
}

// TestStatusWatchExitsWithTheJobsResultInAlignedRows: a job that fails
// makes `status --watch` exit with its code; the rows line up.
func TestStatusWatchExitsWithTheJobsResultInAlignedRows(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	background(t, nil, "serve", "--etcd-endpoints", srv.Endpoint(), "--listen-metrics", "127.0.0.1:0")
	background(t, []string{"TOY_DIR=" + t.TempDir(), "TOY_STEPS=10", "TOY_INTERVAL=0.1", "TOY_FAIL_AT=3"},
		"sidecar", "--etcd-endpoints", srv.Endpoint(), "--job", "doomed", "--np", "1", "--fault-tolerance-level", "0", "--host", "127.0.0.1",
		"--port", freePort(t), "--master-port", freePort(t), "--", "testdata/toytrainer.sh")
	require.Eventually(t, func() bool {
		code, _, _ := cli(t, nil, "status", "--etcd-endpoints", srv.Endpoint(), "--job", "doomed")
		return code == 0
	}, 30*time.Second, 20*time.Millisecond, "the sidecar stores the job's spec")
	watch := background(t, nil, "status", "--etcd-endpoints", srv.Endpoint(), "--job", "doomed", "--watch")
	assert.Equal(t, 3, watch.wait(t), "the watch exits with the failed job's code")
	lines := strings.Split(strings.TrimSpace(watch.out.String()), "\n")
	require.GreaterOrEqual(t, len(lines), 3, watch.out.String())
	header := lines[0]
	for _, col := range []string{"PHASE", "GENERATION", "NP", "NODES", "READY", "WORLD SIZE", "RESTARTS", "LAST RESTART", "MESSAGE"} {
		at := strings.Index(header, col)
		require.Positive(t, at, col)
		for _, row := range lines[1:] {
			assert.Equal(t, byte(' '), row[at-1], "column %s starts at the same place in %q", col, row)
			assert.NotEqual(t, byte(' '), row[at], "column %s starts at the same place in %q", col, row)
		}
	}
	assert.Regexp(t, `^doomed\s+Failed\s+`, lines[len(lines)-1])
}

// TestPaddlePaddlesWords: PaddlePaddle's variables and flag spellings,
// with its documentation's job id 'XXXXXX', and its training command
// without --.
func TestPaddlePaddlesWords(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	background(t, nil, "serve", "--etcd-endpoints", srv.Endpoint(), "--listen-metrics", "127.0.0.1:0")
	server := strings.TrimPrefix(srv.Endpoint(), "http://") // as PaddlePaddle writes it: 127.0.0.1:2379
	paddle := []string{"PADDLE_ELASTIC_SERVER=" + server, "PADDLE_ELASTIC_JOB_ID=XXXXXX", "PADDLE_ELASTIC_NP=1",
		"PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL=1", "TOY_DIR=" + t.TempDir(), "TOY_STEPS=30", "TOY_INTERVAL=0.1"}
	node := background(t, paddle, "sidecar", "--host", "127.0.0.1", "--port", freePort(t), "--master-port", freePort(t), "testdata/toytrainer.sh")

	var status string
	require.Eventually(t, func() bool {
		_, status, _ = cli(t, nil, "status", "--elastic_server="+server, "--job_id=XXXXXX")
		return regexp.MustCompile(`(?m)^XXXXXX\s+Running\s+1\s`).MatchString(status)
	}, 30*time.Second, 50*time.Millisecond, "the job runs under PaddlePaddle's name:\n%s", &status)
	assert.Regexp(t, `Stored under the id xxxxxx-[0-9a-f]{6}\.`, status)
	code, stdout, stderr := cli(t, nil, "scale", "--elastic_server="+server, "--job_id=XXXXXX", "--np=2")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^job "XXXXXX" \(id xxxxxx-[0-9a-f]{6}\): np 1 → 2\n$`, stdout)
	code, stdout, _ = cli(t, nil, "jobs", "--elastic_server="+server)
	require.Equal(t, 0, code)
	assert.Regexp(t, `(?m)^XXXXXX \(xxxxxx-[0-9a-f]{6}\)\s+`, stdout)
	// A second node on this machine needs its own id: the default, the
	// host name, is the first's.
	second := background(t, append(paddle, "PADDLE_ELASTIC_NP=", "ELASTIC_NODE_ID=second"), "sidecar", "--elastic_server="+server, "--job_id=XXXXXX",
		"--host", "127.0.0.1", "--port", freePort(t), "--master-port", freePort(t), "--nproc_per_node=1", "testdata/toytrainer.sh")
	assert.Equal(t, 0, node.wait(t))
	assert.Equal(t, 0, second.wait(t))

	// Errors name what the user set: the variable, or the flag.
	for _, tc := range []struct {
		env  []string
		args []string
		says string
	}{
		{[]string{"PADDLE_ELASTIC_NP=abc"}, nil, `PADDLE_ELASTIC_NP: invalid np "abc"`},
		{[]string{"PADDLE_ELASTIC_NP=5:2"}, nil, `PADDLE_ELASTIC_NP: invalid np "5:2"`},
		{[]string{"PADDLE_ELASTIC_NP=abc"}, []string{"--np=0"}, `--np: invalid np "0"`},
		{[]string{"PADDLE_ELASTIC_JOB_ID=a\tb"}, nil, "PADDLE_ELASTIC_JOB_ID: invalid job id"},
		{[]string{"PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL=high"}, nil, `PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL="high": want a whole number`},
	} {
		args := append(append([]string{"sidecar", "--elastic_server=" + server}, tc.args...), "--", "true")
		code, _, stderr := cli(t, append(append([]string{}, paddle...), tc.env...), args...)
		assert.Equal(t, 2, code, stderr)
		assert.Contains(t, stderr, tc.says)
		assert.NotContains(t, stderr, "membership:", "no package prefix")
		assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	}
}

// TestACommandThatCannotStartFailsAtOnce: run says so in one line with
// 127, before it starts anything; a sidecar's job fails at once with 126,
// spending no restart.
func TestACommandThatCannotStartFailsAtOnce(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := cli(t, nil, "run", "--np", "2", "--", "/nonexistent/train.py")
	assert.Equal(t, 127, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "coordinator run: training command /nonexistent/train.py: not found\n", stderr)

	notExecutable := filepath.Join(t.TempDir(), "train.py")
	require.NoError(t, os.WriteFile(notExecutable, []byte("print(1)\n"), 0o644))
	srv := etcdtest.Start(t)
	background(t, nil, "serve", "--etcd-endpoints", srv.Endpoint(), "--listen-metrics", "127.0.0.1:0")
	node := background(t, nil, "sidecar", "--etcd-endpoints", srv.Endpoint(), "--job", "nox", "--np", "1", "--host", "127.0.0.1",
		"--port", freePort(t), "--master-port", freePort(t), "--log-level", "error", "--", notExecutable)
	assert.Equal(t, 126, node.wait(t))
	assert.Contains(t, node.out.String(), "coordinator sidecar: job nox failed: node ")
	assert.Contains(t, node.out.String(), ": training command "+notExecutable+": not executable (permission denied)\n")
	code, stdout, _ = cli(t, nil, "status", "--etcd-endpoints", srv.Endpoint(), "--job", "nox", "-o", "json")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, `"phase":"Failed","generation":1`, "the generation that ran, not the final plan's")
	assert.Contains(t, stdout, `"restarts":0,"exitCode":126`)
}

// TestOneNodeIsOneNode: the messages count in English.
func TestOneNodeIsOneNode(t *testing.T) {
	t.Parallel()
	r := startRun(t, []string{"--np", "1", "--job", "single"}, toy, "TOY_STEPS=2", "TOY_INTERVAL=0.05")
	require.Equal(t, 0, r.wait())
	assert.Contains(t, r.out.String(), "generation 1 running: 1 node, world size 1")
	assert.NotContains(t, r.out.String(), "1 nodes")
}
