package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/elastictraining/coordinator/operatorbridge/crds"
)

func main() {
	dir := "deploy"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	for _, f := range crds.All() {
		data, err := crds.Render(f)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, f.Name), data, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "crds:", err)
			os.Exit(1)
		}
	}
}
