package jobcontroller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Entrypoints reads the entrypoint and default arguments of images from
// their registries, for the training containers that give no command (the
// PaddleJob examples run their image's own): the sidecar has to wrap the
// command the image would run. An image is read once.
type Entrypoints struct {
	// Mirrors maps a registry host to the host to read its images from.
	Mirrors map[string]string

	mu    sync.Mutex
	known map[string]imageCommand
}

type imageCommand struct {
	entrypoint, cmd []string
}

// lookup returns an image's entrypoint and default arguments.
func (e *Entrypoints) lookup(ctx context.Context, image string) ([]string, []string, error) {
	e.mu.Lock()
	c, ok := e.known[image]
	e.mu.Unlock()
	if ok {
		return c.entrypoint, c.cmd, nil
	}
	ref, err := name.ParseReference(e.mirrored(image))
	if err != nil {
		return nil, nil, fmt.Errorf("image %q: %w", image, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		return nil, nil, unreadableImage{fmt.Errorf("read image %s to find its entrypoint: %w", ref, err)}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, nil, unreadableImage{fmt.Errorf("read the config of image %s: %w", ref, err)}
	}
	c = imageCommand{entrypoint: cfg.Config.Entrypoint, cmd: cfg.Config.Cmd}
	e.mu.Lock()
	if e.known == nil {
		e.known = map[string]imageCommand{}
	}
	e.known[image] = c
	e.mu.Unlock()
	return c.entrypoint, c.cmd, nil
}

// unreadableImage is an image its registry did not give: down, cut off,
// or not yet pushed to. It may give it later, so the job is tried again
// (imageRetry), unlike a template the user has to fix.
type unreadableImage struct{ err error }

func (e unreadableImage) Error() string { return e.err.Error() }
func (e unreadableImage) Unwrap() error { return e.err }

// imageRetry is how often a job waiting for an image's registry tries it
// again: a registry back up is noticed within it.
const imageRetry = 5 * time.Second

// mirrored is image with its registry replaced by its mirror, if any.
func (e *Entrypoints) mirrored(image string) string {
	ref, err := name.ParseReference(image)
	if err != nil {
		return image
	}
	host := ref.Context().RegistryStr()
	to, ok := e.Mirrors[host]
	if !ok {
		return image
	}
	rest := strings.TrimPrefix(ref.Name(), host)
	return to + rest
}

// ParseMirror reads FROM=TO.
func ParseMirror(s string) (from, to string, err error) {
	from, to, ok := strings.Cut(s, "=")
	if !ok || from == "" || to == "" {
		return "", "", fmt.Errorf("%q: want REGISTRY=MIRROR, like registry.example.com=mirror.local:5000", s)
	}
	return from, to, nil
}
