package main

import (
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/elastictraining/coordinator/launcher"
)

// logOptions are the flags that keep each rank's output in a file.
type logOptions struct {
	dir   string
	tee   string
	maxMB int
	fs    *pflag.FlagSet
}

// register adds --log-dir, --tee and --log-max-mb; tee is --tee's default
// ("" lets the command choose).
func (o *logOptions) register(fs *pflag.FlagSet, tee string) {
	o.fs = fs
	fs.StringVar(&o.dir, "log-dir", "", "keep every process's output in DIR/NODE/rank-R.log (ps-N.log for a parameter server), a file a rank, generations marked")
	teeHelp := "with --log-dir, whose output also goes to the terminal: all, rank0 or none"
	if tee == "" {
		teeHelp += " (default: all up to 4 processes, rank0 above)"
	}
	fs.StringVar(&o.tee, "tee", tee, teeHelp)
	fs.IntVar(&o.maxMB, "log-max-mb", launcher.DefaultLogMaxBytes>>20, "with --log-dir, rotate a rank's file to NAME.1 past this many MiB")
	checkGiven(fs, "tee", o.checkTee)
}

// checkTee checks --tee, which may be left to the number of processes.
func (o *logOptions) checkTee() error {
	if o.tee == "" {
		return nil
	}
	if _, err := launcher.ParseTee(o.tee); err != nil {
		return usagef("--tee %v", err)
	}
	return nil
}

// parse checks the flags and returns the logs they ask for, nil without
// --log-dir.
func (o *logOptions) parse() (*launcher.Logs, error) {
	if err := o.checkTee(); err != nil {
		return nil, err
	}
	if o.maxMB < 1 {
		return nil, usagef("--log-max-mb %d: want 1 or more", o.maxMB)
	}
	if o.dir == "" {
		if o.fs != nil && o.fs.Changed("tee") && o.tee != string(launcher.TeeAll) {
			return nil, usagef("--tee %s needs --log-dir: the other processes' output would be lost", o.tee)
		}
		return nil, nil
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return nil, usagef("--log-dir %s: %v", o.dir, err)
	}
	return &launcher.Logs{Dir: dir, MaxBytes: int64(o.maxMB) << 20, Tee: launcher.Tee(o.tee)}, nil
}
