package etcdtest

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/etcdclient"
)

// Server is an embedded etcd member owned by one test.
type Server struct {
	t   testing.TB
	cfg embedetcd.Config

	mu  sync.Mutex
	srv *embedetcd.Server
}

// Start runs a member in a temporary directory and stops it when the test
// ends.
func Start(t testing.TB) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{t: t, cfg: embedetcd.Config{
		DataDir:       filepath.Join(dir, "etcd"),
		LogFile:       filepath.Join(dir, "etcd.log"),
		UnsafeNoFsync: true,
		Fast:          true,
	}}
	var err error
	// A port picked as free can be taken before etcd binds it; try again.
	for attempt := 0; attempt < 5; attempt++ {
		s.cfg.ClientURL, s.cfg.PeerURL = "", ""
		s.srv, err = embedetcd.Start(context.Background(), s.cfg)
		if err == nil {
			break
		}
	}
	require.NoError(t, err, "start embedded etcd")
	s.cfg.ClientURL, s.cfg.PeerURL = s.srv.ClientURL(), s.srv.PeerURL()
	t.Cleanup(s.Stop)
	return s
}

// Endpoint is the client URL of the member; it stays the same across a
// restart.
func (s *Server) Endpoint() string { return s.cfg.ClientURL }

// Client returns a new client of the member, closed when the test ends.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: []string{s.Endpoint()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Stop stops the member, keeping its data. Safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Close()
		s.srv = nil
	}
}

// Restart starts the stopped member again on the same data and addresses.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Nil(t, s.srv, "restart of a running member")
	// The old listener's port may take a moment to be released.
	deadline := time.Now().Add(20 * time.Second)
	for {
		srv, err := embedetcd.Start(context.Background(), s.cfg)
		if err == nil {
			s.srv = srv
			return
		}
		if time.Now().After(deadline) {
			require.NoError(t, err, "restart embedded etcd")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
