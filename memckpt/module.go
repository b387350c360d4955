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

// progress is _elastic_progress.py, the trainers' side of the progress
// page the guard watches for hangs.
//
//go:embed _elastic_progress.py
var progress []byte

// inplace is _elastic_inplace.py, the trainers' side of training in
// place: elastic.run keeps the process across generations.
//
//go:embed _elastic_inplace.py
var inplace []byte

// siteCustomize is sitecustomize.py: it maps a process's progress page
// before its script runs, then runs the sitecustomize it shadows.
//
//go:embed sitecustomize.py
var siteCustomize []byte

// Module is the source of elastic.py.
func Module() []byte { return module }

// moduleFiles are the files WriteModule writes, the progress module
// before the sitecustomize that imports it.
var moduleFiles = []moduleFile{
	{"_elastic_progress.py", progress},
	{"_elastic_inplace.py", inplace},
	{"elastic.py", module},
	{"sitecustomize.py", siteCustomize},
}

// WriteModule writes elastic.py, the progress module it uses and the
// sitecustomize.py that maps a process's progress page into dir, each
// atomically, so that a trainer starting meanwhile reads whole files.
func WriteModule(dir string) error { return writeFiles(dir, moduleFiles) }

// WriteUserModule writes elastic.py and the modules it uses into
// dir, for a script run outside a sidecar: not the sitecustomize.py,
// which acts only under a sidecar and has no place in a user's directory.
func WriteUserModule(dir string) error { return writeFiles(dir, moduleFiles[:3]) }

// moduleFile is one file of the trainers' modules.
type moduleFile struct {
	name string
	src  []byte
}

func writeFiles(dir string, files []moduleFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := writeAtomic(dir, f.name, f.src); err != nil {
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
