package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/membership"
)

// TestMain runs the tests, or, when a test started this binary as a
// sidecar or a guard (`run` starts sidecars from its own executable), the
// command line: a test binary must never run the tests again in a child.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-test.") {
		os.Exit(execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv))
	}
	goleak.VerifyTestMain(m)
}

// runCLI runs the command line in process with the given environment.
func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	code = execute(args, strings.NewReader(""), &out, &errOut, lookup)
	return code, out.String(), errOut.String()
}

func TestBadInputIsOneLineAndExitCode2(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"run", "--np", "5:2", "--", "true"}, `--np: invalid np "5:2": minimum 5 is greater than maximum 2`},
		{[]string{"run", "--np", "0", "--", "true"}, "need at least 1"},
		{[]string{"run", "--np", "abc", "--", "true"}, `"abc" is not a positive whole number`},
		{[]string{"run", "--np", "2"}, "no training command"},
		{[]string{"run", "--", "true"}, "--np is required"},
		{[]string{"run", "--np", "2", "--job", strings.Repeat("x_", 130), "--", "true"}, "--job: invalid job id: longer than 253 characters"},
		{[]string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "a\tb", "--", "true"}, "--job: invalid job id"},
		{[]string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--clean-pod-policy", "None", "--", "true"}, `--clean-pod-policy "None": want Always`},
		{[]string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--success-policy", "Most", "--", "true"}, `--success-policy "Most"`},
		{[]string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--tee", "rank0", "--", "true"}, "--tee rank0 needs --log-dir"},
		{[]string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--log-dir", "x", "--tee", "some", "--", "true"}, `--tee "some": want all, rank0 or none`},
		{[]string{"run", "--np", "2", "--log-max-mb", "0", "--", "true"}, "--log-max-mb 0: want 1 or more"},
		{[]string{"run", "--np", "2", "--spares", "abc", "--", "true"}, `--spares "abc": want a whole number such as 1`},
		{[]string{"run", "--np", "2", "--spares", "1.5", "--", "true"}, `--spares "1.5": want a whole number such as 1`},
		{[]string{"jobs", "--dial-timeout", "nonsense"}, `--dial-timeout "nonsense": want a duration such as 30s or 2m`},
		{[]string{"status", "--watch=maybe"}, `--watch "maybe": want true or false`},
		{[]string{"serve", "--autoscale-min-gain-fraction", "x"}, `--autoscale-min-gain-fraction "x": want a number such as 0.5`},
		{[]string{"run", "--np"}, "--np needs a value"},
		{[]string{"jobs", "--dial-timeout"}, "--dial-timeout needs a value: want a duration such as 30s or 2m"},
		{[]string{"run", "--np", "2", "--hang-timeout", "1ms", "--", "true"}, "--hang-timeout 1ms: want 500ms or more, the least the hang watch honours; 0 (off) or auto"},
		{[]string{"sidecar", "--job", "j", "--startup-timeout", "100ms", "--", "true"}, "--startup-timeout 100ms: want 500ms or more"},
		{[]string{"run", "--np", "2", "--framework", "tf", "--", "true"}, `--framework: framework "tf": want auto, pytorch, paddle or mindspore`},
		{[]string{"run", "--np", "2", "--devices", "0,0", "--", "true"}, `--devices "0,0": want auto, none, a count, or distinct device indices as 0,1,2`},
		{[]string{"run", "--np", "2", "--schedulers", "2", "--", "true"}, "--schedulers 2: want 0 or 1"},
		{[]string{"run", "--np", "2", "--", "torchrun", "--nproc-per-node", "2", "t.py"}, "torchrun is a launcher and rendezvous of its own"},
		{[]string{"run", "--np", "2", "--", "msrun", "t.py"}, "coordinator run --np 2 --schedulers 1 --nproc-per-node 8 -- python train.py"},
		{[]string{"run", "--np", "2", "--", "python", "-m", "paddle.distributed.launch", "--nnodes", "2", "t.py"}, "--nnodes: under the sidecar the generation gives it"},
		{[]string{"run", "--np", "2", "--nproc-per-node", "3", "--", "python", "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "t.py"},
			"--nproc-per-node 3, but the launcher's --nproc_per_node is 2: give one"},
		{[]string{"run", "--np", "2", "--ps", "1", "--", "python", "-m", "paddle.distributed.launch", "t.py"}, "for --ps or --schedulers give the training script itself"},
		{[]string{"sidecar", "--job", "j", "--framework", "pytorch", "--", "python", "-m", "paddle.distributed.launch", "t.py"}, "--framework pytorch: the command is PaddlePaddle's launcher"},
		{[]string{"sidecar", "--job", "j", "--role", "ps", "--", "python", "-m", "paddle.distributed.launch", "t.py"}, "for a ps node give the training script itself"},
		{[]string{"serve", "--etcd-endpoints", "http://127.0.0.1:1", "--finished-job-retention", "-1s"}, "--finished-job-retention -1s: must not be negative"},
		{[]string{"events", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--plot", "out.jpg"}, `--plot "out.jpg": want a file name ending in .png or .svg`},
		{[]string{"jobs", "--etcd-endpoints", "http://127.0.0.1:1", "-o", "yaml"}, `-o "yaml": want table or json`},
		{[]string{"delete", "--etcd-endpoints", "http://127.0.0.1:1"}, "--job is required"},
		{[]string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j"}, "no training command"},
		{[]string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--role", "chief", "--", "true"}, `role "chief"`},
		{[]string{"sidecar", "--job", "j", "--", "true"}, "--etcd-endpoints is required"},
		{[]string{"serve", "--etcd-endpoints", "http://127.0.0.1:1", "--kubernetes", "--job-kinds", "Foo"}, `--job-kinds "Foo"`},
		{[]string{"serve", "--etcd-endpoints", "http://127.0.0.1:1", "--kubernetes", "--registry-mirror", "bad"}, "want REGISTRY=MIRROR"},
		{[]string{"serve", "--etcd-endpoints", "http://127.0.0.1:1", "--kubernetes", "--workload-resource", "x"}, "want RESOURCE.VERSION.GROUP"},
		{[]string{"serve", "--etcd-endpoints", "http://127.0.0.1:1", "--kubernetes", "--autoscale-deletion-cost"}, "--autoscale-deletion-cost needs --autoscale"},
		{[]string{"certs", "--out", "/nonexistent-dir-for-test", "--etcd-members", "0"}, "--etcd-members 0: want 1..9"},
		{[]string{"etcd", "--data-dir", "/nonexistent-dir-for-test", "--auto-compaction-retention", "0s"}, "must be positive"},
		{[]string{"etcd", "--data-dir", "/nonexistent-dir-for-test", "--quota-backend-bytes", "-1"}, "must be positive"},
		{[]string{"certs"}, "--out: a directory"},
		{[]string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--np", "1:100001", "--", "true"}, "more than the maximum of 100000"},
		{[]string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--ttl", "1s", "--", "true"}, "--ttl 1s: at least 2s"},
		{[]string{"scale", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--np", "-1"}, "not a positive whole number"},
		{[]string{"scale", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j"}, "--np is required"},
		{[]string{"scale", "--etcd-endpoints", "http://127.0.0.1:1", "--np", "2"}, "--job is required"},
		{[]string{"status", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "-o", "yaml"}, `-o "yaml": want table or json`},
		{[]string{"status", "--job", "j", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"status", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--prefix", "elastic"}, "--prefix"},
		{[]string{"scale", "--etcd-endpoints", "https://127.0.0.1:1", "--job", "j", "--np", "2", "--cacert", "/nonexistent/ca.pem"}, "--cacert"},
		{[]string{"scale", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--np", "2", "--user", "alice"}, "needs its password in ELASTIC_ETCD_PASSWORD"},
		{[]string{"etcd"}, "--data-dir is required"},
		{[]string{"etcd", "--data-dir", "/nonexistent", "--initial-cluster-state", "joined"}, `--initial-cluster-state "joined": want new or existing`},
		{[]string{"etcd", "--data-dir", "/nonexistent", "--name", "e3", "--initial-cluster", "e0=http://a:2380,e1=http://b:2380"}, "does not name this member (--name e3)"},
		{[]string{"etcd", "--data-dir", "/nonexistent", "--peer-cert-file", "testdata/public-root.pem"}, "--peer-cert-file and --peer-key-file go together"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"jobs", "--etcd-endpoints", "notahost:::"}, `--etcd-endpoints: "notahost:::" is not HOST:PORT or a URL such as http://HOST:2379`},
		{[]string{"jobs", "--etcd-endpoints", "http://127.0.0.1"}, `"http://127.0.0.1" has no port`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, tc.args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, tc.mention)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		})
	}
}

func TestUnreachableEtcdIsOneLineAndExitCode1(t *testing.T) {
	for _, args := range [][]string{
		{"sidecar", "--job", "j", "--np", "2", "--", "true"},
		{"scale", "--job", "j", "--np", "2"},
		{"status", "--job", "j"},
		{"serve", "--listen-metrics", "127.0.0.1:0"},
	} {
		t.Run(args[0], func(t *testing.T) {
			args = append([]string{args[0], "--etcd-endpoints", "http://127.0.0.1:1", "--dial-timeout", "300ms"}, args[1:]...)
			code, _, stderr := runCLI(t, nil, args...)
			assert.Equal(t, 1, code)
			assert.Contains(t, stderr, "etcd at http://127.0.0.1:1: unreachable")
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		})
	}
}

func TestTheDialTimeoutComesFromTheEnvironmentToo(t *testing.T) {
	code, _, stderr := runCLI(t, map[string]string{"ELASTIC_DIAL_TIMEOUT": "abc"}, "status", "--job", "j", "--etcd-endpoints", "http://127.0.0.1:1")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `ELASTIC_DIAL_TIMEOUT "abc": want a positive duration`)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)

	code, _, _ = runCLI(t, map[string]string{"ELASTIC_DIAL_TIMEOUT": "abc"}, "status", "--job", "j", "--etcd-endpoints", "http://127.0.0.1:1", "--dial-timeout", "200ms")
	assert.Equal(t, 1, code, "the flag wins over the variable")
	code, _, stderr = runCLI(t, map[string]string{"ELASTIC_DIAL_TIMEOUT": "200ms"}, "status", "--job", "j", "--etcd-endpoints", "http://127.0.0.1:1")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "unreachable")
}

func TestEnvironmentFallbacks(t *testing.T) {
	srv := etcdtest.Start(t)
	// PaddlePaddle's elastic variables stand in for the flags.
	env := map[string]string{"PADDLE_ELASTIC_SERVER": srv.Endpoint(), "PADDLE_ELASTIC_JOB_ID": "paddle-job"}
	code, _, stderr := runCLI(t, env, "scale", "--np", "3")
	require.Equal(t, 1, code, "an unknown job is not created by a scale")
	assert.Contains(t, stderr, "job paddle-job does not exist")
	assert.Contains(t, stderr, "add --create")

	code, stdout, stderr := runCLI(t, env, "scale", "--np", "3", "--create")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "job paddle-job: np 3\n", stdout)

	code, stdout, _ = runCLI(t, env, "scale", "--np", "2:4")
	require.Equal(t, 0, code)
	assert.Equal(t, "job paddle-job: np 3 → 2:4\n", stdout)

	code, stdout, _ = runCLI(t, env, "status", "-o", "json")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, `"np":{"min":2,"max":4}`)
	assert.Contains(t, stdout, `"phase":"Waiting"`)

	code, stdout, _ = runCLI(t, env, "scale", "--np", "5")
	require.Equal(t, 0, code)
	assert.Equal(t, "job paddle-job: np 2:4 → 5 (the range 2:4 is replaced: the job now runs at exactly 5)\n", stdout)

	for _, command := range []string{"status", "events"} {
		code, _, stderr = runCLI(t, env, command, "--job", "nosuchjob")
		assert.Equal(t, 1, code)
		assert.Equal(t, "coordinator "+command+": job nosuchjob does not exist (no spec, node or status under /elastic/jobs/nosuchjob/); "+
			"check --job, or list the jobs with `coordinator jobs`\n", stderr)
	}
}

// A command a person typed says at once that nothing listens at the
// endpoint: a dial timeout of an hour is not waited out.
func TestARefusedEtcdIsSaidAtOnce(t *testing.T) {
	for _, command := range []string{"status", "scale", "jobs", "events", "delete"} {
		args := []string{command, "--etcd-endpoints", "127.0.0.1:1", "--dial-timeout", "1h"}
		if command != "jobs" {
			args = append(args, "--job", "j")
		}
		if command == "scale" {
			args = append(args, "--np", "2")
		}
		code, _, stderr := runCLI(t, nil, args...)
		assert.Equal(t, 1, code, command)
		assert.Equal(t, "coordinator "+command+": etcd at 127.0.0.1:1: unreachable: connection refused (nothing listens on 127.0.0.1:1)\n", stderr)
	}
}

// A job that has ended is not scaled: its sidecars have gone, and the
// record of how it ended stays as it was.
func TestScaleRefusesAJobThatHasEnded(t *testing.T) {
	srv := etcdtest.Start(t)
	keys := membership.DefaultKeys()
	_, err := srv.Client(t).Put(t.Context(), keys.Spec("done"), `{"np":"2"}`)
	require.NoError(t, err)
	_, err = srv.Client(t).Put(t.Context(), keys.Status("done"), `{"phase":"Failed","generation":3,"np":"2","message":"node n1 failed with exit code 3"}`)
	require.NoError(t, err)
	code, stdout, stderr := runCLI(t, nil, "scale", "--etcd-endpoints", srv.Endpoint(), "--job", "done", "--np", "3")
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "coordinator scale: job done has ended (Failed: node n1 failed with exit code 3); delete it (coordinator delete --job done) to run it again\n", stderr)
	resp, err := srv.Client(t).Get(t.Context(), keys.Spec("done"))
	require.NoError(t, err)
	assert.JSONEq(t, `{"np":"2"}`, string(resp.Kvs[0].Value), "the spec is as it was")
}

// Every build says the project's version, the repository's VERSION, with
// `version` and with --version.
func TestVersion(t *testing.T) {
	release, err := os.ReadFile("../../VERSION")
	require.NoError(t, err)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, _ := runCLI(t, nil, args...)
		require.Equal(t, 0, code)
		assert.Regexp(t, `^coordinator `+regexp.QuoteMeta(strings.TrimSpace(string(release)))+` \(go\S+, etcd client \S+\)\n$`, stdout)
	}
}

func TestInstallCopiesTheBinary(t *testing.T) {
	dst := t.TempDir() + "/coordinator"
	code, _, stderr := runCLI(t, nil, "install", dst)
	require.Equal(t, 0, code, stderr)
	info, err := os.Stat(dst)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), info.Mode().Perm())

	nested := t.TempDir() + "/a/b/coordinator"
	code, _, stderr = runCLI(t, nil, "install", nested)
	require.Equal(t, 0, code, "the parent directory is created: %s", stderr)
	_, err = os.Stat(nested)
	require.NoError(t, err)

	code, _, stderr = runCLI(t, nil, "install", "/proc/nonexistent/coordinator")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "install /proc/nonexistent/coordinator")
}

// A value read from a variable is named by the variable in the error.
func TestErrorsNameTheVariableAValueCameFrom(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		args    []string
		mention string
	}{
		{map[string]string{"PADDLE_ELASTIC_SERVER": "notahost:::"}, []string{"jobs"}, `PADDLE_ELASTIC_SERVER: "notahost:::" is not HOST:PORT`},
		{map[string]string{"PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL": "9"}, []string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--", "true"}, "PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL 9: want 0, 1 or 2"},
		{map[string]string{"ELASTIC_TTL": "1s"}, []string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--", "true"}, "ELASTIC_TTL 1s: at least 2s"},
		{map[string]string{"ELASTIC_ROLE": "bogus"}, []string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--", "true"}, `ELASTIC_ROLE: role "bogus"`},
		{map[string]string{"ELASTIC_TTL": "1s"}, []string{"sidecar", "--etcd-endpoints", "http://127.0.0.1:1", "--job", "j", "--ttl", "1s", "--", "true"}, "--ttl 1s: at least 2s"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.env, tc.args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, tc.mention)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		})
	}
}
