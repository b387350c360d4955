package memckpt

import (
	_ "embed"
	"os"
	"path/filepath"
)

// module is elastic.py, the trainers' side of the store.
//
//go:embed elastic.py
var module []byte

// Module is the source of elastic.py.
func Module() []byte { return module }

// WriteModule writes elastic.py into dir, atomically, so that a trainer
// starting meanwhile reads the whole file.
func WriteModule(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".elastic.py-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(module); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, "elastic.py"))
}
