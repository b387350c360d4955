//go:build !sidecaronly

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

func newInstallCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "install PATH",
		Short: "Copy this binary to PATH (its directory is created), for an init container that adds the sidecar to a training image",
		Example: `  # In a pod: an init container from the coordinator's image fills a shared volume,
  # and the training container runs /elastic/coordinator sidecar -- python train.py.
  coordinator install /elastic/coordinator`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this binary: %w", err)
			}
			return copyExecutable(self, args[0])
		},
	}
}

// copyExecutable copies src to dst through a temporary file, so that dst is
// never a partial binary.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return usagef("install %s: %v", dst, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".coordinator-*")
	if err != nil {
		return usagef("install %s: %v", dst, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
