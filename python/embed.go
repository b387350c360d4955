// Package python holds the trainers' side of the coordinator: the Python
// package elastic (checkpoints, progress, training in place) and the
// sitecustomize that maps a training process's progress page before its
// script runs. The sidecars write them onto their trainers' PYTHONPATH
// (package memckpt); `pip install ./python` installs the package alone,
// for a script run outside a sidecar.
package python

import "embed"

// Files are the package's sources and sitecustomize.py, by their paths
// here (elastic/__init__.py, ...).
//
//go:embed elastic/*.py sitecustomize.py
var Files embed.FS

// Package are the package's files, in the order they are written: the
// modules before the __init__ that imports them, so that a trainer
// starting meanwhile finds a whole package or none.
var Package = []string{"elastic/progress.py", "elastic/checkpoint.py", "elastic/inplace.py", "elastic/__init__.py"}

// SiteCustomize is the file a sidecar writes beside the package.
const SiteCustomize = "sitecustomize.py"

// Source is the text of one of Files.
func Source(name string) []byte {
	b, err := Files.ReadFile(name)
	if err != nil {
		panic("python: no file " + name + " embedded") // a programming error: the names are constants
	}
	return b
}
