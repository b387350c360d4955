package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
)

// TestElasticJobOverMutualTLSWithAUserPerJob deploys as deploy/ does:
// certificates from `coordinator certs`, etcd with client certificates
// required, auth turned on by the coordinator, and the sidecars of each
// job an etcd user of their own. The job runs; its user reaches its keys
// and no other job's; it is gone with the job.
func TestElasticJobOverMutualTLSWithAUserPerJob(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, _, stderr := cli(t, nil, "certs", "--out", dir)
	require.Equal(t, 0, code, stderr)
	file := func(name string) string { return filepath.Join(dir, name) }
	endpoint := "https://127.0.0.1:" + freePort(t)
	etcdProc := background(t, nil, "etcd", "--data-dir", file("etcd"), "--listen-client-urls", endpoint,
		"--listen-peer-urls", "http://127.0.0.1:"+freePort(t),
		"--cert-file", file("etcd-server.crt"), "--key-file", file("etcd-server.key"), "--trusted-ca-file", file("ca.crt"), "--client-cert-auth")
	require.Eventually(t, func() bool { return strings.Contains(etcdProc.out.String(), "etcd serving clients at "+endpoint) },
		30*time.Second, 10*time.Millisecond, "etcd never served:\n%s", etcdProc.out)

	e := newKubeEnv(t, kubeOptions{injected: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"},
		etcdFlags:  []string{"--etcd-endpoints", endpoint, "--cacert", file("ca.crt"), "--cert", file("coordinator.crt"), "--key", file("coordinator.key")},
		bridgeArgs: []string{"--etcd-enable-auth", "--sidecar-etcd-auth", "--sidecar-etcd-secret", "elastic-sidecar-etcd"}})
	e.apply(mustRead(t, file("secrets.yaml")), e.ns)
	applyCRDs(t, e.c, e.dyn)
	require.NoError(t, e.createJob(elasticJobYAML("secure", 2, "")))
	e.jobStatus("secure", "Running at 2", runningAt(2))

	secret, err := e.c.Client.CoreV1().Secrets(e.ns).Get(t.Context(), "secure-etcd", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "job-secure", string(secret.Data["user"]))
	asJob := []string{"ELASTIC_ETCD_PASSWORD=" + string(secret.Data["password"])}
	sidecarTLS := []string{"--etcd-endpoints", endpoint, "--cacert", file("ca.crt"), "--cert", file("sidecar.crt"), "--key", file("sidecar.key"),
		"--user", "job-secure", "--dial-timeout", "2s"}
	code, stdout, stderr := cli(t, asJob, append([]string{"status", "--job", "secure"}, sidecarTLS...)...)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `secure\s+Running`, stdout)
	code, _, stderr = cli(t, asJob, append([]string{"status", "--job", "other"}, sidecarTLS...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "permission denied", "a job's user reaches no other job")
	code, _, stderr = cli(t, nil, append([]string{"status", "--job", "secure"}, sidecarTLS[:len(sidecarTLS)-4]...)...)
	assert.Equal(t, 1, code, "the sidecars' certificate alone has no rights")
	assert.Contains(t, stderr, "permission denied")

	// The job's pods go with it through the garbage collector, which
	// learns of a resource type created after it started (the CRDs above)
	// only at its discovery resync, 30 s apart: the user goes once they have.
	require.NoError(t, e.dyn.Resource(jobv1.GroupVersionResource).Namespace(e.ns).Delete(t.Context(), "secure", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		code, _, stderr := cli(t, asJob, append([]string{"status", "--job", "secure"}, sidecarTLS...)...)
		return code != 0 && strings.Contains(stderr, "authentication failed")
	}, 90*time.Second, 200*time.Millisecond, "the job's etcd user outlived it")
}
