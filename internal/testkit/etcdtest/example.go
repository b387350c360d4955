package etcdtest

import (
	"context"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/embedetcd"
)

// ForExample runs a member in a temporary directory for a runnable example,
// which has no test to own it, and returns a client of it; stop closes the
// client, stops the member and removes the directory. It panics on error:
// an example's output shows it.
func ForExample() (cli *clientv3.Client, stop func()) {
	dir, err := os.MkdirTemp("", "etcd-example")
	if err != nil {
		panic(err)
	}
	srv, err := embedetcd.Start(context.Background(), embedetcd.Config{DataDir: filepath.Join(dir, "etcd"),
		LogFile: filepath.Join(dir, "etcd.log"), UnsafeNoFsync: true, Fast: true})
	if err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	cli, err = clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}})
	if err != nil {
		srv.Close()
		os.RemoveAll(dir)
		panic(err)
	}
	return cli, func() {
		cli.Close()
		srv.Close()
		os.RemoveAll(dir)
	}
}
