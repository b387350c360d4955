//go:build !sidecaronly

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/memckpt"
	pysrc "github.com/elastictraining/coordinator/python"
)

func newPythonModuleCommand() *cobra.Command {
	var toStdout bool
	cmd := &cobra.Command{
		Use:   "python-module [DIR]",
		Short: "Write the trainers' Python package elastic into DIR (DIR/elastic/), for a script run outside a sidecar",
		Long: `Every sidecar puts the package elastic (elastic.save, elastic.load, elastic.run,
...) on its trainers' PYTHONPATH. A script that imports it and runs on its
own, outside a sidecar, finds it where this command writes it: DIR/elastic
(DIR is the current directory if not given). Outside a sidecar, save and
load use the checkpoint file alone, and run trains once, as a plain
script. From the coordinator's source, ` + "`pip install ./python`" + ` installs the
same package.`,
		Example: `  coordinator python-module ~/.local/lib/elastic && PYTHONPATH=~/.local/lib/elastic python3 train.py`,
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if toStdout {
				return usagef("--print: elastic is a package of %d files now (elastic/): write it into a directory with python-module DIR", len(pysrc.Package))
			}
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if err := memckpt.WriteUserModule(dir); err != nil {
				return fmt.Errorf("write the package elastic into %s: %w", dir, err)
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				abs = dir
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s; a script outside a sidecar imports it with PYTHONPATH=%s%s\n",
				filepath.Join(abs, "elastic")+string(filepath.Separator), abs, pythonPathRest())
			return nil
		},
	}
	cmd.Flags().BoolVar(&toStdout, "print", false, "no longer supported: the module is a package")
	_ = cmd.Flags().MarkHidden("print")
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
