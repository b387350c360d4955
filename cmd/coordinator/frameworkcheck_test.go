package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/trainerenv"
)

func TestOlderThan(t *testing.T) {
	for _, tc := range []struct {
		version, oldest string
		older           bool
	}{
		{"1.13.0a0", "1.13", false},
		{"2.15.0+cu132", "1.13", false},
		{"1.12.1", "1.13", true},
		{"3", "3.0", false},
		{"2.6.2", "3.0", true},
		{"3.3.1", "3.0", false},
		{"2.10.0", "2.3", false},
		{"2.2.14", "2.3", true},
		{"dev", "2.3", false},
	} {
		assert.Equal(t, tc.older, olderThan(tc.version, tc.oldest), "%s against %s", tc.version, tc.oldest)
	}
}

// A Python without the framework, or with a version too old, is refused in
// one line naming the package and the version wanted; a source tree with
// no version (a stand-in on PYTHONPATH) and a command that is no Python
// are let through.
func TestAFrameworkMissingOrTooOldIsOneLine(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s: %v", python, err)
	}
	ctx := context.Background()
	err := checkFrameworkInstalled(ctx, trainerenv.MindSpore, []string{python, "train.py"})
	require.Error(t, err)
	assert.Equal(t, "--framework mindspore: /usr/bin/python3 cannot import mindspore: install mindspore 2.3 or later for it", err.Error())

	// A distribution's metadata that says an old version.
	site := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(site, "paddle"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(site, "paddle", "__init__.py"), nil, 0o644))
	t.Setenv("PYTHONPATH", site)
	assert.NoError(t, checkFrameworkInstalled(ctx, trainerenv.Paddle, []string{python, "train.py"}), "a source tree: no version to check")
	meta := filepath.Join(site, "paddlepaddle-2.6.2.dist-info")
	require.NoError(t, os.MkdirAll(meta, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(meta, "METADATA"), []byte("Metadata-Version: 2.1\nName: paddlepaddle\nVersion: 2.6.2\n"), 0o644))
	err = checkFrameworkInstalled(ctx, trainerenv.Paddle, []string{python, "-m", "paddle.distributed.launch", "train.py"})
	require.Error(t, err)
	assert.Equal(t, "--framework paddle: /usr/bin/python3 has paddlepaddle 2.6.2; this coordinator needs 3.0 or later", err.Error())

	assert.NoError(t, checkFrameworkInstalled(ctx, trainerenv.PyTorch, []string{python, "train.py"}), "Debian's torch 1.13")
	assert.NoError(t, checkFrameworkInstalled(ctx, trainerenv.MindSpore, []string{"./train.sh"}), "no Python: nothing to look at")
	assert.NoError(t, checkFrameworkInstalled(ctx, trainerenv.AnyFramework, []string{python, "train.py"}), "no framework named")
}
