package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/etcdclient"
)

// Config configures Start.
type Config struct {
	// Binary is the coordinator command.
	Binary string
	// Dir holds each member's data and log.
	Dir string
	// Size is the number of members; 3 if zero.
	Size int
	// Env is added to each member's environment (to mark the processes a
	// test started).
	Env []string
	// LogLevel of the members' own log; warn if empty.
	LogLevel string
	// PeerTLS, if set, secures the peer URLs: every member presents the
	// certificate and requires its peers' to be signed by the CA.
	PeerTLS *TLSFiles
}

// TLSFiles is a certificate, its key and the CA that signs the peers'.
type TLSFiles struct {
	Cert, Key, CA string
}

// Cluster is a running etcd cluster.
type Cluster struct {
	cfg     Config
	Members []*Member
}

// Member is one etcd process.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	args      []string
	log       string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start forms a new cluster and returns when every member serves.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Size == 0 {
		cfg.Size = 3
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "warn"
	}
	scheme := "http"
	if cfg.PeerTLS != nil {
		scheme = "https"
	}
	c := &Cluster{cfg: cfg}
	var initial []string
	for i := range cfg.Size {
		client, err := embedetcd.FreePort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		peer, err := embedetcd.FreePort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		m := &Member{
			Name:      fmt.Sprintf("etcd-%d", i),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", client),
			PeerURL:   fmt.Sprintf("%s://127.0.0.1:%d", scheme, peer),
		}
		m.log = filepath.Join(cfg.Dir, m.Name+".log")
		initial = append(initial, m.Name+"="+m.PeerURL)
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		m.args = []string{"etcd", "--name", m.Name, "--data-dir", filepath.Join(cfg.Dir, m.Name),
			"--listen-client-urls", m.ClientURL, "--listen-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new", "--log-level", cfg.LogLevel}
		if t := cfg.PeerTLS; t != nil {
			m.args = append(m.args, "--peer-cert-file", t.Cert, "--peer-key-file", t.Key,
				"--peer-trusted-ca-file", t.CA, "--peer-client-cert-auth")
		}
		if err := c.Restart(m); err != nil {
			c.Close()
			return nil, err
		}
	}
	for _, m := range c.Members {
		if err := c.WaitServing(ctx, m); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.ClientURL)
	}
	return out
}

// Restart starts a member that is not running, on its data.
func (c *Cluster) Restart(m *Member) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("etcd member %s is running", m.Name)
	}
	if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
		return err
	}
	log, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(c.cfg.Binary, m.args...)
	cmd.Env = append(os.Environ(), c.cfg.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd member %s: %w", m.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	m.cmd, m.done = cmd, done
	return nil
}

// Kill stops a member with SIGKILL and waits until it is gone.
func (c *Cluster) Kill(m *Member) {
	m.signal(syscall.SIGKILL)
}

// Stop stops a member with SIGTERM and waits until it is gone.
func (c *Cluster) Stop(m *Member) {
	m.signal(syscall.SIGTERM)
}

func (m *Member) signal(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(sig)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	m.cmd, m.done = nil, nil
}

// Running reports whether the member's process runs.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// Pid is the member's process id, 0 when it is not running.
func (m *Member) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Log is the member's output so far.
func (m *Member) Log() string {
	data, _ := os.ReadFile(m.log)
	return string(data)
}

// WaitServing waits until the member answers a status request.
func (c *Cluster) WaitServing(ctx context.Context, m *Member) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if _, err := c.status(ctx, m); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd member %s never served: %w\n%s", m.Name, ctx.Err(), tail(m.Log()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Leader is the member that leads the cluster now.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		st, err := c.status(ctx, m)
		if err == nil && st.Header.MemberId == st.Leader {
			return m, nil
		}
	}
	return nil, errors.New("no etcd member leads")
}

// MoveLeader hands the lead from the current leader to member to.
func (c *Cluster) MoveLeader(ctx context.Context, to *Member) error {
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	if leader == to {
		return nil
	}
	target, err := c.status(ctx, to)
	if err != nil {
		return err
	}
	cli, err := c.client(leader)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.MoveLeader(ctx, target.Header.MemberId)
	return err
}

// Close stops every member.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		c.Stop(m)
	}
}

func (c *Cluster) status(ctx context.Context, m *Member) (*clientv3.StatusResponse, error) {
	cli, err := c.client(m)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return cli.Status(ctx, m.ClientURL)
}

func (c *Cluster) client(m *Member) (*clientv3.Client, error) {
	return etcdclient.New(etcdclient.Config{Endpoints: []string{m.ClientURL}, DialTimeout: time.Second})
}

func tail(s string) string { return s[max(len(s)-3000, 0):] }
