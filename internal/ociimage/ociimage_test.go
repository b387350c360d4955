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

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/ociimage"
)

// The image as `make image` builds it: opened from its tarball, its
// entrypoint, user and binary are checked, and the binary runs inside the
// image's own file system (a chroot, as the image's user, where the test
// may), as a container and the init container that copies it out run it.
func TestTheImageRunsItsStaticBinaryAsNonRoot(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(dir, "image.tar")
	makeImage := func() {
		make := exec.Command("make", "image", "VERSION=v9.9.9", "IMAGE_TAR="+archive, "IMAGE_DIR="+filepath.Join(dir, "build"))
		make.Dir = "../.."
		out, err := make.CombinedOutput()
		require.NoError(t, err, "make image:\n%s", out)
	}
	makeImage()
	tag, err := name.NewTag("elastic-coordinator:v9.9.9")
	require.NoError(t, err)
	opened, err := tarball.ImageFromPath(archive, &tag)
	require.NoError(t, err)
	first, err := opened.Digest()
	require.NoError(t, err)
	makeImage()
	again, err := tarball.ImageFromPath(archive, &tag)
	require.NoError(t, err)
	second, err := again.Digest()
	require.NoError(t, err)
	assert.Equal(t, first, second, "one source, one image")

	cfg, err := opened.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{ociimage.BinaryPath}, cfg.Config.Entrypoint)
	assert.Equal(t, "65532:65532", cfg.Config.User, "not root")
	assert.Equal(t, "linux", cfg.OS)
	assert.Equal(t, runtime.GOARCH, cfg.Architecture)
	layers, err := opened.Layers()
	require.NoError(t, err)
	assert.Len(t, layers, 1, "no base image: one layer")

	// The image's file system, unpacked.
	root := filepath.Join(dir, "rootfs")
	tr := tar.NewReader(mutate.Extract(opened))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		path := filepath.Join(root, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(path, 0o755))
			require.NoError(t, os.Chmod(path, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)))
		case tar.TypeReg:
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			data, err := io.ReadAll(tr)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, data, os.FileMode(h.Mode&0o777)))
		}
	}
	for _, d := range []string{filepath.Dir(dir), dir, root} { // the image's user walks down to it
		require.NoError(t, os.Chmod(d, 0o755))
	}
	inImage, err := os.ReadFile(filepath.Join(root, ociimage.BinaryPath))
	require.NoError(t, err, "no %s in the image", ociimage.BinaryPath)
	st, err := os.Stat(filepath.Join(root, ociimage.BinaryPath))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm())
	f, err := elf.NewFile(bytes.NewReader(inImage))
	require.NoError(t, err)
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "static: no dynamic loader, as an empty image has none")
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	require.NoError(t, err)
	assert.Contains(t, string(passwd), ":65532:65532:", "the image's user has a name")

	// Run inside it, as its user, the way a container does; what the
	// init container runs (install) needs /proc, which a container has.
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(ociimage.BinaryPath, args...)
		cmd.Env = []string{"PATH=/usr/local/bin"}
		if os.Getuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
			cmd.Dir = "/"
		} else {
			cmd.Path = filepath.Join(root, ociimage.BinaryPath)
		}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
		return string(out)
	}
	if os.Getuid() == 0 {
		proc := filepath.Join(root, "proc")
		require.NoError(t, os.MkdirAll(proc, 0o555))
		require.NoError(t, syscall.Mount("proc", proc, "proc", 0, ""))
		t.Cleanup(func() { _ = syscall.Unmount(proc, syscall.MNT_DETACH) })
	}
	assert.Contains(t, run("version"), "coordinator v9.9.9")
	target := "/tmp/elastic/coordinator"
	if os.Getuid() != 0 {
		target = filepath.Join(root, target)
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "tmp", "elastic"), 0o777))
	require.NoError(t, os.Chmod(filepath.Join(root, "tmp", "elastic"), 0o777))
	run("install", target)
	copied, err := os.ReadFile(filepath.Join(root, "tmp", "elastic", "coordinator"))
	require.NoError(t, err)
	assert.Equal(t, inImage, copied, "install copies the binary out, for the training container")
}

// modeBits are a tar header's setuid, setgid and sticky bits as a FileMode.
func modeBits(mode int64) os.FileMode {
	var m os.FileMode
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	if mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	return m
}

// deploy/ names the image `make image` builds: the tag is VERSION's.
func TestDeployNamesTheVersionedImage(t *testing.T) {
	version, err := os.ReadFile("../../VERSION")
	require.NoError(t, err)
	kustomization, err := os.ReadFile("../../deploy/base/kustomization.yaml")
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^\s+newName: elastic-coordinator\n\s+newTag: `+regexp.QuoteMeta(strings.TrimSpace(string(version)))+`\b`, string(kustomization))
}
