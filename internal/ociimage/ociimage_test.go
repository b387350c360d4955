package ociimage_test

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/ociimage"
)

// The image as `make image` builds it: opened from its tarball, its
// entrypoint, user and binary are checked, and the binary in it runs, as the
// image's user where the test may switch to it.
func TestTheImageRunsItsStaticBinaryAsNonRoot(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // the image's user runs the binary from here
		require.NoError(t, os.Chmod(d, 0o755))
	}
	binary := filepath.Join(dir, "coordinator")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=v9.9.9", "-o", binary, "./cmd/coordinator")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	img, err := ociimage.Build(binary, runtime.GOARCH, "v9.9.9", time.Unix(0, 0))
	require.NoError(t, err)
	again, err := ociimage.Build(binary, runtime.GOARCH, "v9.9.9", time.Unix(0, 0))
	require.NoError(t, err)
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	assert.Equal(t, d1, d2, "one binary, one image")

	archive := filepath.Join(dir, "image.tar")
	require.NoError(t, ociimage.WriteTarball(img, "elastic-coordinator:v9.9.9", archive))
	tag, err := name.NewTag("elastic-coordinator:v9.9.9")
	require.NoError(t, err)
	opened, err := tarball.ImageFromPath(archive, &tag)
	require.NoError(t, err)

	cfg, err := opened.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{ociimage.BinaryPath}, cfg.Config.Entrypoint)
	assert.Equal(t, "65532:65532", cfg.Config.User, "not root")
	assert.Equal(t, "linux", cfg.OS)
	assert.Equal(t, runtime.GOARCH, cfg.Architecture)
	layers, err := opened.Layers()
	require.NoError(t, err)
	assert.Len(t, layers, 1, "no base image: one layer")

	// The binary out of the image's file system.
	var inImage []byte
	tr := tar.NewReader(mutate.Extract(opened))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if "/"+h.Name == ociimage.BinaryPath {
			assert.Equal(t, int64(0o755), h.Mode&0o777)
			inImage, err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}
	require.NotEmpty(t, inImage, "no %s in the image", ociimage.BinaryPath)
	exe := filepath.Join(dir, "from-image")
	require.NoError(t, os.WriteFile(exe, inImage, 0o755))
	f, err := elf.NewFile(bytes.NewReader(inImage))
	require.NoError(t, err)
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "static: no dynamic loader, as an empty image has none")
	}

	run := exec.Command(exe, "version")
	if os.Getuid() == 0 {
		run.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	}
	got, err := run.CombinedOutput()
	require.NoError(t, err, "%s", got)
	assert.Contains(t, string(got), "coordinator v9.9.9")
}

// deploy/ names the image `make image` builds: the tag is VERSION's.
func TestDeployNamesTheVersionedImage(t *testing.T) {
	version, err := os.ReadFile("../../VERSION")
	require.NoError(t, err)
	kustomization, err := os.ReadFile("../../deploy/base/kustomization.yaml")
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^\s+newName: elastic-coordinator\n\s+newTag: `+regexp.QuoteMeta(strings.TrimSpace(string(version)))+`\b`, string(kustomization))
}
