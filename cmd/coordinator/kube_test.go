//go:build !sidecaronly

package main

import (
	"os"
	"path/filepath"
	"strings"
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

// Outside a pod, without --sidecar-image, serve --kubernetes injects the
// image `make image` tags for its version, VERSION's unless the build
// stamped another. The flag wins, inside a pod too.
func TestSidecarImageOutsideAPod(t *testing.T) {
	was := version
	t.Cleanup(func() { version = was })

	release, err := os.ReadFile(filepath.Join("..", "..", "VERSION"))
	require.NoError(t, err)
	version = ""
	image, err := (&kubeOptions{}).image(t.Context(), nil)
	require.NoError(t, err)
	assert.Equal(t, "elastic-coordinator:"+strings.TrimSpace(string(release)), image)

	version = "v9.9.9"
	image, err = (&kubeOptions{}).image(t.Context(), nil)
	require.NoError(t, err)
	assert.Equal(t, "elastic-coordinator:v9.9.9", image)
	image, err = (&kubeOptions{sidecarImage: "registry.example.com/team/elastic-coordinator:v1", pod: "p"}).image(t.Context(), nil)
	require.NoError(t, err)
	assert.Equal(t, "registry.example.com/team/elastic-coordinator:v1", image)

	// The name is the Makefile's image's.
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	require.NoError(t, err)
	assert.Contains(t, string(makefile), "IMAGE     ?= "+imageName+":$(VERSION)")
}
