package memckpt

import (
	"os"
	"path/filepath"

	pysrc "github.com/elastictraining/coordinator/python"
)

// moduleFiles are the files WriteModule writes: the package elastic, then
// the sitecustomize.py that loads its progress module.
func moduleFiles() []string { return append(append([]string{}, pysrc.Package...), pysrc.SiteCustomize) }

// WriteModule writes the package elastic (the trainers' side of the
// store, of the progress page and of training in place) and the
// sitecustomize.py that maps a process's progress page into dir, each
// file atomically, so that a trainer starting meanwhile reads whole files.
func WriteModule(dir string) error { return writeFiles(dir, moduleFiles()) }

// WriteUserModule writes the package elastic into dir, for a script run
// outside a sidecar: not the sitecustomize.py, which acts only under a
// sidecar and has no place in a user's directory.
func WriteUserModule(dir string) error { return writeFiles(dir, pysrc.Package) }

func writeFiles(dir string, files []string) error {
	for _, name := range files {
		sub := filepath.Join(dir, filepath.Dir(name))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
		if err := writeAtomic(sub, filepath.Base(name), pysrc.Source(name)); err != nil {
			return err
		}
	}
	return nil
}

func writeAtomic(dir, name string, src []byte) error {
	tmp, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(src); err != nil {
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
	return os.Rename(tmp.Name(), filepath.Join(dir, name))
}
