//go:build !sidecaronly

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/memckpt"
)

func newPythonModuleCommand() *cobra.Command {
	var toStdout bool
	cmd := &cobra.Command{
		Use:   "python-module [DIR]",
		Short: "Write the trainers' Python module elastic.py (and _elastic_progress.py, which it uses) into DIR, for a script run outside a sidecar",
		Long: `Every sidecar puts the module elastic (elastic.save, elastic.load, ...) on its
trainers' PYTHONPATH. A script that imports it and runs on its own, outside
a sidecar, finds it where this command writes it: DIR (the current directory
if not given), or with --print on standard output. Outside a sidecar, save
and load use the checkpoint file alone.`,
		Example: `  coordinator python-module ~/.local/lib/elastic && PYTHONPATH=~/.local/lib/elastic python3 train.py
  coordinator python-module --print > elastic.py`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if toStdout {
				if len(args) > 0 {
					return usagef("--print writes to standard output: give no DIR")
				}
				_, err := cmd.OutOrStdout().Write(memckpt.Module())
				return err
			}
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if err := memckpt.WriteUserModule(dir); err != nil {
				return fmt.Errorf("write elastic.py into %s: %w", dir, err)
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				abs = dir
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s; a script outside a sidecar imports it with PYTHONPATH=%s%s\n",
				filepath.Join(abs, "elastic.py"), abs, pythonPathRest())
			return nil
		},
	}
	cmd.Flags().BoolVar(&toStdout, "print", false, "write the module to standard output instead")
	return cmd
}

// pythonPathRest is ":$PYTHONPATH" when one is set, so that the line
// printed keeps it.
func pythonPathRest() string {
	if os.Getenv("PYTHONPATH") != "" {
		return ":$PYTHONPATH"
	}
	return ""
}
