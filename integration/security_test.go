package integration

import (
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/pki"
	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
)

// certs writes a CA, a server certificate for 127.0.0.1, a client
// certificate and an etcd peer's certificate (server and client) to dir.
type certs struct{ ca, serverCert, serverKey, clientCert, clientKey, peerCert, peerKey string }

func makeCerts(t *testing.T, dir string) certs {
	t.Helper()
	ca, err := pki.NewCA("test ca", time.Hour)
	require.NoError(t, err)
	issue := func(name string, server, client bool) (string, string) {
		p, err := ca.Issue(pki.Request{CommonName: name, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: server, Client: client}, time.Hour)
		require.NoError(t, err)
		certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		require.NoError(t, os.WriteFile(certFile, p.CertPEM, 0o600))
		require.NoError(t, os.WriteFile(keyFile, p.KeyPEM, 0o600))
		return certFile, keyFile
	}
	c := certs{ca: filepath.Join(dir, "ca.crt")}
	require.NoError(t, os.WriteFile(c.ca, ca.CertPEM, 0o600))
	c.serverCert, c.serverKey = issue("server", true, false)
	c.clientCert, c.clientKey = issue("client", false, true)
	c.peerCert, c.peerKey = issue("peer", true, true)
	return c
}

// bgProcess is a process of the binary that runs until the test ends.
type bgProcess struct {
	cmd  *exec.Cmd
	out  *proctest.Buffer
	done chan struct{}
	code int
}

// background runs the binary until it exits or the test ends.
func background(t *testing.T, env []string, args ...string) *bgProcess {
	t.Helper()
	return backgroundIn(t, nil, env, args...)
}

// backgroundIn is background in a cgroup of proctest.Cgroup's (nil: the
// test's own).
func backgroundIn(t *testing.T, cg *os.File, env []string, args ...string) *bgProcess {
	t.Helper()
	p := &bgProcess{out: &proctest.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	if cg != nil {
		p.cmd.SysProcAttr = proctest.InCgroup(cg)
	}
	p.cmd.Dir = repoRoot
	p.cmd.Env = append(append(os.Environ(), patientDial), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", args[0], p.out)
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *bgProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(60 * time.Second):
		t.Fatalf("%v did not exit:\n%s", p.cmd.Args, p.out)
		return 0
	}
}

// freePort is a port free on 127.0.0.1 that no other test of this run
// was given, between 10000 and 20000: below the kernel's ephemeral range
// (32768 on), whose ports any outgoing connection can take between the
// check and their use, and below the range `coordinator run` gives its
// nodes (20000 to 32000).
func freePort(t *testing.T) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		p := 10000 + mathrand.IntN(10000)
		if portsGiven[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		portsGiven[p] = true
		return strconv.Itoa(p)
	}
	p, err := embedetcd.FreePort("127.0.0.1")
	require.NoError(t, err)
	return strconv.Itoa(p)
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

func TestAJobOverTLSWithClientCertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c := makeCerts(t, dir)
	endpoint := "https://127.0.0.1:" + freePort(t)
	etcdProc := background(t, nil, "etcd", "--data-dir", filepath.Join(dir, "etcd"), "--listen-client-urls", endpoint,
		"--listen-peer-urls", "http://127.0.0.1:"+freePort(t),
		"--cert-file", c.serverCert, "--key-file", c.serverKey, "--trusted-ca-file", c.ca, "--client-cert-auth")
	require.Eventually(t, func() bool { return strings.Contains(etcdProc.out.String(), "etcd serving clients at "+endpoint) },
		30*time.Second, 10*time.Millisecond, "etcd never served:\n%s", etcdProc.out)

	tlsFlags := []string{"--etcd-endpoints", endpoint, "--cacert", c.ca, "--cert", c.clientCert, "--key", c.clientKey}
	metrics := "127.0.0.1:" + freePort(t)
	background(t, nil, append([]string{"serve", "--listen-metrics", metrics}, tlsFlags...)...)
	toyDir := t.TempDir()
	var sidecars []*bgProcess
	for i := range 2 {
		args := append([]string{"sidecar", "--job", "tls", "--np", "2", "--node-id", fmt.Sprintf("n%d", i), "--host", "127.0.0.1",
			"--port", freePort(t), "--master-port", freePort(t)}, tlsFlags...)
		sidecars = append(sidecars, background(t, []string{"TOY_DIR=" + toyDir, "TOY_STEPS=5", "TOY_INTERVAL=0.1"},
			append(args, "--", "testdata/toytrainer.sh")...))
	}
	for _, s := range sidecars {
		assert.Equal(t, 0, s.wait(t), "the sidecar exits 0 when the job succeeds")
	}

	code, stdout, stderr := cli(t, nil, append([]string{"status", "--job", "tls"}, tlsFlags...)...)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `tls\s+Succeeded`, stdout)

	resp, err := http.Get("http://" + metrics + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), `elastic_job_generations_total{job="tls"} 1`)
	assert.Regexp(t, regexp.MustCompile(`elastic_job_step_seconds_count\{job="tls",step="total"\} 1`), string(body))
	resp, err = http.Get("http://" + metrics + "/healthz")
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok\nleader: true\n", string(body))

	// Without the CA, or without a client certificate, there is no way
	// in, and the one line says which is missing; so does plain HTTP to
	// a TLS port.
	hostport := strings.TrimPrefix(endpoint, "https://")
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--etcd-endpoints", endpoint, "--cert", c.clientCert, "--key", c.clientKey}, "is not signed by a CA this side trusts: give its CA with --cacert"},
		{[]string{"--etcd-endpoints", endpoint, "--cacert", c.ca}, "refused this side's client certificate: give one it trusts with --cert and --key"},
		{[]string{"--etcd-endpoints", "http://" + hostport}, hostport + " speaks TLS: use https://" + hostport},
		{[]string{"--etcd-endpoints", hostport}, hostport + " speaks TLS"},
	} {
		code, _, stderr = cli(t, nil, append([]string{"status", "--job", "tls", "--dial-timeout", "20s"}, tc.args...)...)
		assert.Equal(t, 1, code, stderr)
		assert.Contains(t, stderr, tc.says)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	}
}

// TestWhatAnswersInsteadOfEtcdIsSaid: a port that is not etcd (an HTTP
// server, a server that says something else or nothing, plain etcd asked
// for TLS, nothing at all) is one specific line, not a dial timeout.
func TestWhatAnswersInsteadOfEtcdIsSaid(t *testing.T) {
	t.Parallel()
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Server", "nginx/1.25")
		http.NotFound(w, nil)
	}), ReadHeaderTimeout: time.Second}
	webL, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = web.Serve(webL) }()
	t.Cleanup(func() { _ = web.Close() })

	talker := func(greeting string) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				if greeting != "" {
					_, _ = conn.Write([]byte(greeting))
				}
				go func() { time.Sleep(5 * time.Second); conn.Close() }()
			}
		}()
		return l.Addr().String()
	}
	ssh, silent := talker("SSH-2.0-OpenSSH_9.2\r\n"), talker("")
	plain := etcdtest.Start(t)
	closed := "127.0.0.1:" + freePort(t)

	for _, tc := range []struct {
		endpoint, says string
	}{
		{"http://" + webL.Addr().String(), webL.Addr().String() + ` is an HTTP server, not etcd (GET /version answered "404 Not Found", server nginx/1.25)`},
		{"http://" + ssh, ssh + ` is not etcd: it answered "SSH-2.0-OpenSSH_9.2"`},
		{"http://" + silent, silent + " accepted the connection but does not answer as etcd does"},
		{strings.Replace(plain.Endpoint(), "http://", "https://", 1), "does not speak TLS: use http://"},
		{"http://" + closed, "unreachable: connection refused (nothing listens on " + closed + ")"},
	} {
		code, _, stderr := cli(t, nil, "status", "--job", "j", "--etcd-endpoints", tc.endpoint, "--dial-timeout", "20s")
		assert.Equal(t, 1, code, stderr)
		assert.Contains(t, stderr, tc.says)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	}
}

func TestEtcdAuthConfinesAUserToItsJob(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	admin := srv.Client(t)
	ctx := t.Context()
	for _, step := range []func() error{
		func() error { _, err := admin.RoleAdd(ctx, "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "job-a"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "job-a", "/elastic/jobs/a/", clientv3.GetPrefixRangeEnd("/elastic/jobs/a/"),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "alice", "alicepw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "alice", "job-a"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		require.NoError(t, step())
	}

	etcd := []string{"--etcd-endpoints", srv.Endpoint()}
	background(t, []string{"ELASTIC_ETCD_PASSWORD=rootpw"}, append([]string{"serve", "--user", "root", "--listen-metrics", "127.0.0.1:0"}, etcd...)...)
	alice := []string{"ELASTIC_ETCD_PASSWORD=alicepw", "TOY_DIR=" + t.TempDir(), "TOY_STEPS=2", "TOY_INTERVAL=0.05"}
	sidecar := background(t, alice, append([]string{"sidecar", "--user", "alice", "--job", "a", "--np", "1", "--host", "127.0.0.1",
		"--port", freePort(t), "--master-port", freePort(t)}, append(etcd, "--", "testdata/toytrainer.sh")...)...)
	assert.Equal(t, 0, sidecar.wait(t), "alice's job ran on her role's keys alone")

	code, _, stderr := cli(t, alice, append([]string{"scale", "--user", "alice", "--job", "b", "--np", "2"}, etcd...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "permission denied")
	assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)

	code, _, stderr = cli(t, []string{"ELASTIC_ETCD_PASSWORD=wrong"}, append([]string{"scale", "--user", "alice", "--job", "a", "--np", "2"}, etcd...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "authentication failed")
}
