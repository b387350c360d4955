package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const (
	// BinaryPath is where the binary is in the image, and its entrypoint.
	BinaryPath = "/usr/local/bin/coordinator"
	// User is the image's user and group: no name, no privileges (the
	// "nonroot" id of distroless images, which deploy/ also asks for).
	User = "65532:65532"
)

// Build makes the image of a static linux binary for arch (GOARCH). Every
// time stamp is created, so that the same binary gives the same image.
func Build(binary, arch, version string, created time.Time) (v1.Image, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	dirs := []struct {
		path string
		mode int64
	}{{"etc/", 0o755}, {"tmp/", 0o1777}, {"usr/", 0o755}, {"usr/local/", 0o755}, {"usr/local/bin/", 0o755}}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.path, Mode: d.mode, ModTime: created}); err != nil {
			return nil, err
		}
	}
	// Tools that look the user up (and Python's getpass) find a name.
	files := []struct {
		path string
		mode int64
		data []byte
	}{
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n")},
		{"etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")},
		{BinaryPath[1:], 0o755, data},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: f.mode, Size: int64(len(f.data)), ModTime: created}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	content := layer.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(content)), nil })
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: l, History: v1.History{
		Created: v1.Time{Time: created}, CreatedBy: "make image", Comment: "the coordinator binary",
	}})
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Created = "linux", arch, v1.Time{Time: created}
	cfg.Config.Entrypoint = []string{BinaryPath}
	cfg.Config.User = User
	cfg.Config.WorkingDir = "/tmp"
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "elastic-coordinator",
		"org.opencontainers.image.version": version,
	}
	return mutate.ConfigFile(img, cfg)
}

// WriteTarball writes img, tagged ref, to path.
func WriteTarball(img v1.Image, ref, path string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image: tag %q: %w", ref, err)
	}
	return tarball.WriteToFile(path, tag, img)
}

// Push sends img to ref in a registry, with the credentials of the
// user's docker config, if any.
func Push(img v1.Image, ref string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image: tag %q: %w", ref, err)
	}
	return remote.Write(tag, img, remote.WithAuthFromKeychain(authn.DefaultKeychain))
}
