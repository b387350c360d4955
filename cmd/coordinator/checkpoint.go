package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/memckpt"
	"github.com/elastictraining/coordinator/sidecar"
	"github.com/elastictraining/coordinator/trainerenv"
)

var _ memckpt.Node = (*sidecar.Agent)(nil)

// checkpointOptions are the flags of the in-memory checkpoint store, on
// sidecar and run alike.
type checkpointOptions struct {
	copies int
	// moduleDir is the modules' directory of a sidecar without a store,
	// removed by close.
	moduleDir    *memckpt.ModuleDir
	memory       string
	port         int
	diskInterval time.Duration
	envErr       error
}

// register adds the flags to fs; withPort adds --checkpoint-port, which
// run has not: its nodes share one host, and each picks a free port.
func (o *checkpointOptions) register(fs *pflag.FlagSet, env lookupEnv, withPort bool) {
	copies, copiesErr := envInt(env, memckpt.DefaultCopies, "ELASTIC_CHECKPOINT_COPIES")
	port, portErr := envInt(env, 0, "ELASTIC_CHECKPOINT_PORT")
	interval, intervalErr := envDuration(env, memckpt.DefaultDiskInterval, "ELASTIC_CHECKPOINT_DISK_INTERVAL")
	o.envErr = firstErr(copiesErr, portErr, intervalErr)
	fs.IntVar(&o.copies, "checkpoint-copies", copies,
		"checkpoints a node keeps in memory for elastic.save, its own and its peers' replicas together; 0 keeps none"+envNote("ELASTIC_CHECKPOINT_COPIES"))
	envString(fs, &o.memory, "checkpoint-memory", env, memckpt.FormatSize(memckpt.DefaultMemory),
		"memory a node's checkpoints may take, as 512MiB or 2GiB; one checkpoint may take half", "ELASTIC_CHECKPOINT_MEMORY")
	checkGiven(fs, "checkpoint-memory", func() error {
		if _, err := memckpt.ParseSize(o.memory); err != nil {
			return usagef("--checkpoint-memory: %v", err)
		}
		return nil
	})
	if withPort {
		fs.IntVar(&o.port, "checkpoint-port", port, "TCP port where this node serves checkpoint replicas to its peers; 0 picks a free one"+envNote("ELASTIC_CHECKPOINT_PORT"))
	}
	fs.DurationVar(&o.diskInterval, "checkpoint-disk-interval", interval,
		"how often the newest checkpoint is written to the path elastic.save named (and when the node leaves)"+envNote("ELASTIC_CHECKPOINT_DISK_INTERVAL"))
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// validate checks the flags; it returns the memory bound.
func (o *checkpointOptions) validate() (int64, error) {
	if o.envErr != nil {
		return 0, o.envErr
	}
	memory, err := memckpt.ParseSize(o.memory)
	switch {
	case err != nil:
		return 0, usagef("--checkpoint-memory: %v", err)
	case o.copies < 0:
		return 0, usagef("--checkpoint-copies %d: want 0 or more", o.copies)
	case o.copies > 0 && memory < 1<<20:
		return 0, usagef("--checkpoint-memory %s: want at least 1MiB", o.memory)
	case o.port < 0 || o.port > 65535:
		return 0, usagef("--checkpoint-port %d: out of range", o.port)
	case o.diskInterval <= 0:
		return 0, usagef("--checkpoint-disk-interval %s: must be positive", o.diskInterval)
	}
	return memory, nil
}

// args passes the flags on to the sidecars that run starts, which pick
// free ports.
func (o *checkpointOptions) args() []string {
	return []string{"--checkpoint-copies", strconv.Itoa(o.copies), "--checkpoint-memory", o.memory,
		"--checkpoint-port", "0", "--checkpoint-disk-interval", o.diskInterval.String()}
}

// start opens the node's checkpoint store; nil when it keeps none. The
// node record advertises it; the trainers' environment names it. Without
// one, the Python modules (elastic, and the progress counting that hang
// watching reads) are still written and on the trainers' path, in a
// directory that goes when the sidecar does (moduleDir).
func (o *checkpointOptions) start(ctx context.Context, cli *clientv3.Client, keys membership.Keys, job string, node *membership.Node,
	logger hclog.Logger) (*memckpt.Service, trainerenv.Checkpoint, error) {
	if o.copies == 0 {
		if n := memckpt.SweepModuleDirs(os.TempDir()); n > 0 {
			logger.Info("removed the module directories of sidecars that were killed", "count", n, "dir", os.TempDir())
		}
		dir, err := memckpt.NewModuleDir("")
		if err != nil {
			return nil, trainerenv.Checkpoint{}, fmt.Errorf("write the trainers' Python modules: %w", err)
		}
		o.moduleDir = dir
		return nil, trainerenv.Checkpoint{PythonPath: memckpt.PythonPathWith(dir.Path(), os.Getenv("PYTHONPATH"))}, nil
	}
	memory, _ := o.validate()
	listen := ":" + strconv.Itoa(o.port)
	if net.ParseIP(node.Host) != nil {
		listen = net.JoinHostPort(node.Host, strconv.Itoa(o.port))
	}
	cfg := memckpt.Config{
		Job: job, NodeID: node.ID, Client: cli, Keys: keys, Copies: o.copies, Memory: memory, DiskInterval: o.diskInterval,
		Listen: listen, Host: node.Host, Logger: logger,
	}
	svc, err := memckpt.New(ctx, cfg)
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		// The address others reach the node at is not one of its own
		// (NAT, a proxy): serve on every interface; peers still prove the
		// job's secret.
		cfg.Listen = ":" + strconv.Itoa(o.port)
		svc, err = memckpt.New(ctx, cfg)
	}
	if err != nil {
		return nil, trainerenv.Checkpoint{}, err
	}
	node.Checkpoint = svc.Addr()
	return svc, trainerenv.Checkpoint{Socket: svc.Socket(), Incarnation: svc.Incarnation(), PythonPath: svc.PythonPath(os.Getenv("PYTHONPATH"))}, nil
}

// checkpointedWorkload asks for the newest checkpoint on disk whenever a
// generation's processes stop, without waiting for it.
type checkpointedWorkload struct {
	sidecar.Workload
	store *memckpt.Service
}

func (w checkpointedWorkload) Stop(ctx context.Context, grace time.Duration) error {
	err := w.Workload.Stop(ctx, grace)
	w.store.KickDisk()
	return err
}

// watchedWorkload is a checkpointed workload whose processes are watched
// for hangs: the wrapper must not hide that.
type watchedWorkload struct {
	checkpointedWorkload
	watcher sidecar.Watcher
}

func (w watchedWorkload) Observations() <-chan sidecar.Observation { return w.watcher.Observations() }

func (w watchedWorkload) StepMarks(gen int64) *membership.StepMarks {
	if m, ok := w.watcher.(sidecar.Marker); ok {
		return m.StepMarks(gen)
	}
	return nil
}

// Cold implements sidecar.Warmer: the processes' warm interpreters.
func (w watchedWorkload) Cold() (bool, <-chan struct{}) {
	if c, ok := w.watcher.(sidecar.Warmer); ok {
		return c.Cold()
	}
	return false, nil
}

// InPlace implements sidecar.InPlacer.
func (w watchedWorkload) InPlace() bool {
	c, ok := w.watcher.(sidecar.InPlacer)
	return ok && c.InPlace()
}

// Began implements sidecar.InPlacer.
func (w watchedWorkload) Began() []string {
	if c, ok := w.watcher.(sidecar.InPlacer); ok {
		return c.Began()
	}
	return nil
}

func (w watchedWorkload) StopStacks(ctx context.Context) error {
	err := w.watcher.StopStacks(ctx)
	w.store.KickDisk()
	return err
}

// close removes what start left without a store.
func (o *checkpointOptions) close() {
	if o.moduleDir != nil {
		o.moduleDir.Close()
	}
}
