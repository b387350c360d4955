//go:build !sidecaronly

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Outside a cluster without --kubeconfig, serve --kubernetes reads
// ~/.kube/config the way kubectl does, and says so when there is none.
func TestKubeconfigFallsBackToTheHomeFile(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	home := t.TempDir()
	t.Setenv("HOME", home)

	_, err := (&kubeOptions{}).restConfig()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no Kubernetes cluster to talk to")
	assert.Contains(t, err.Error(), filepath.Join(home, ".kube", "config"))
	assert.Contains(t, err.Error(), "give --kubeconfig")

	require.NoError(t, os.MkdirAll(filepath.Join(home, ".kube"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".kube", "config"), []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://kube.example:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600))
	config, err := (&kubeOptions{}).restConfig()
	require.NoError(t, err)
	assert.Equal(t, "https://kube.example:6443", config.Host)

	_, err = (&kubeOptions{kubeconfig: filepath.Join(home, "missing")}).restConfig()
	require.Error(t, err)
	assert.Equal(t, "kubeconfig "+filepath.Join(home, "missing")+": no such file or directory", err.Error())
}
