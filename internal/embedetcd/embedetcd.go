package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Config configures Start.
type Config struct {
	// DataDir holds the member's data. Required.
	DataDir string
	// Name of the member; "default" if empty.
	Name string
	// ClientURL is where clients connect, e.g. http://127.0.0.1:2379. An
	// empty URL or port 0 picks a free localhost port.
	ClientURL string
	// AdvertiseClientURL is the client URL the member tells clients; the
	// ClientURL if empty. A member listening on 0.0.0.0 advertises a name.
	AdvertiseClientURL string
	// PeerURL is where the member listens for peers; a free localhost port
	// if empty. A single member has no peers, but etcd wants the address.
	PeerURL string
	// AdvertisePeerURL is the peer URL the other members reach this one
	// at; the PeerURL if empty.
	AdvertisePeerURL string
	// MetricsURL, if set, serves /metrics, /health and /readyz over plain
	// http: probes that cannot present a client certificate reach it.
	MetricsURL string
	// InitialCluster lists every member of a new cluster as
	// name=peerURL,...; this member alone if empty. ClusterState is "new"
	// when the cluster is being formed and "existing" when this member
	// joins one that runs; a member with data in DataDir always rejoins
	// with what it stored. ClusterToken keeps two clusters formed from the
	// same peer URLs apart.
	InitialCluster string
	ClusterState   string
	ClusterToken   string
	// PeerCertFile and PeerKeyFile, when set, make the peer URL serve TLS;
	// with PeerClientCertAuth, peers must present a certificate signed by
	// PeerTrustedCAFile.
	PeerCertFile       string
	PeerKeyFile        string
	PeerTrustedCAFile  string
	PeerClientCertAuth bool
	// LogLevel of etcd's own log ("error" if empty); LogFile, if set,
	// receives it instead of stderr.
	LogLevel string
	LogFile  string
	// CertFile and KeyFile, when set, make the client URL serve TLS
	// (scheme https). With ClientCertAuth, clients must present a
	// certificate signed by TrustedCAFile.
	CertFile       string
	KeyFile        string
	TrustedCAFile  string
	ClientCertAuth bool
	// UnsafeNoFsync trades durability for speed; for tests only.
	UnsafeNoFsync bool
	// Fast shortens raft ticks so that a restarted member elects itself in
	// tens of milliseconds; for tests.
	Fast bool
	// StartTimeout bounds the wait for the member to serve; 30 s if zero.
	StartTimeout time.Duration
	// HistoryRetention is how much history is kept before it is
	// compacted; DefaultHistoryRetention if zero. QuotaBytes is the
	// database quota; DefaultQuotaBytes if zero.
	HistoryRetention time.Duration
	QuotaBytes       int64
}

// DefaultHistoryRetention is how much of etcd's history a member keeps
// before compacting it; DefaultQuotaBytes is its database quota (etcd's own
// default, made explicit).
const (
	DefaultHistoryRetention = 5 * time.Minute
	DefaultQuotaBytes       = 2 << 30
)

// Server is a running embedded etcd member.
type Server struct {
	etcd      *embed.Etcd
	clientURL string
	peerURL   string
}

// Start runs an etcd member and returns once it serves clients.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded etcd: no data directory")
	}
	if cfg.Name == "" {
		cfg.Name = "default"
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "error"
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.HistoryRetention <= 0 {
		cfg.HistoryRetention = DefaultHistoryRetention
	}
	if cfg.QuotaBytes <= 0 {
		cfg.QuotaBytes = DefaultQuotaBytes
	}
	clientURL, err := resolveURL(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: client url: %w", err)
	}
	peerURL, err := resolveURL(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: peer url: %w", err)
	}

	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	ec.ListenClientUrls = []url.URL{*clientURL}
	ec.AdvertiseClientUrls = []url.URL{*clientURL}
	if cfg.AdvertiseClientURL != "" {
		adv, err := url.Parse(cfg.AdvertiseClientURL)
		if err != nil || adv.Host == "" {
			return nil, fmt.Errorf("embedded etcd: advertise client url %q: want scheme://host:port", cfg.AdvertiseClientURL)
		}
		ec.AdvertiseClientUrls = []url.URL{*adv}
	}
	if err := peerConfig(ec, cfg, peerURL); err != nil {
		return nil, err
	}
	if cfg.MetricsURL != "" {
		u, err := url.Parse(cfg.MetricsURL)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return nil, fmt.Errorf("embedded etcd: metrics url %q: want http://host:port", cfg.MetricsURL)
		}
		ec.ListenMetricsUrls = []url.URL{*u}
	}
	ec.LogLevel = cfg.LogLevel
	if cfg.LogFile != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.LogFile), 0o700); err != nil {
			return nil, fmt.Errorf("embedded etcd: log directory: %w", err)
		}
		ec.LogOutputs = []string{cfg.LogFile}
	}
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	// History is compacted: every membership change writes a revision per
	// node (acks), which nothing needs once the watchers have it. Five
	// minutes of history outlast any watcher's reconnect; a watcher later
	// than that lists again (presence.Follow). The quota is etcd's
	// default made explicit: 2 GiB, far above what compacted jobs use.
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = cfg.HistoryRetention.String()
	ec.QuotaBackendBytes = cfg.QuotaBytes
	if (cfg.CertFile != "") != (clientURL.Scheme == "https") {
		return nil, fmt.Errorf("embedded etcd: client url %s: use https with a certificate and key, http without", clientURL)
	}
	ec.ClientTLSInfo.CertFile = cfg.CertFile
	ec.ClientTLSInfo.KeyFile = cfg.KeyFile
	ec.ClientTLSInfo.TrustedCAFile = cfg.TrustedCAFile
	ec.ClientTLSInfo.ClientCertAuth = cfg.ClientCertAuth
	if cfg.Fast {
		ec.TickMs = 10
		ec.ElectionMs = 100
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "member")); err == nil {
		ec.ClusterState = embed.ClusterStateFlagExisting
	}

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: start: %w", err)
	}
	timer := time.NewTimer(cfg.StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("embedded etcd: not ready after %s", cfg.StartTimeout)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	return &Server{etcd: e, clientURL: clientURL.String(), peerURL: peerURL.String()}, nil
}

// peerConfig sets the member's peer side: its URLs, the cluster it forms or
// joins, and peer TLS.
func peerConfig(ec *embed.Config, cfg Config, peerURL *url.URL) error {
	ec.ListenPeerUrls = []url.URL{*peerURL}
	ec.AdvertisePeerUrls = []url.URL{*peerURL}
	if cfg.AdvertisePeerURL != "" {
		adv, err := url.Parse(cfg.AdvertisePeerURL)
		if err != nil || adv.Host == "" {
			return fmt.Errorf("embedded etcd: advertise peer url %q: want scheme://host:port", cfg.AdvertisePeerURL)
		}
		ec.AdvertisePeerUrls = []url.URL{*adv}
	}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	if cfg.InitialCluster != "" {
		ec.InitialCluster = cfg.InitialCluster
	}
	switch cfg.ClusterState {
	case "", embed.ClusterStateFlagNew:
		ec.ClusterState = embed.ClusterStateFlagNew
	case embed.ClusterStateFlagExisting:
		ec.ClusterState = embed.ClusterStateFlagExisting
	default:
		return fmt.Errorf("embedded etcd: initial cluster state %q: want new or existing", cfg.ClusterState)
	}
	if cfg.ClusterToken != "" {
		ec.InitialClusterToken = cfg.ClusterToken
	}
	if (cfg.PeerCertFile == "") != (cfg.PeerKeyFile == "") {
		return errors.New("embedded etcd: a peer certificate and a peer key go together")
	}
	if (cfg.PeerCertFile != "") != (peerURL.Scheme == "https") {
		return fmt.Errorf("embedded etcd: peer url %s: use https with a peer certificate and key, http without", peerURL)
	}
	if cfg.PeerClientCertAuth && cfg.PeerTrustedCAFile == "" {
		return errors.New("embedded etcd: peer client certificate auth needs a trusted CA for peers")
	}
	ec.PeerTLSInfo.CertFile = cfg.PeerCertFile
	ec.PeerTLSInfo.KeyFile = cfg.PeerKeyFile
	ec.PeerTLSInfo.TrustedCAFile = cfg.PeerTrustedCAFile
	ec.PeerTLSInfo.ClientCertAuth = cfg.PeerClientCertAuth
	return nil
}

// ClientURL is the address clients connect to.
func (s *Server) ClientURL() string { return s.clientURL }

// PeerURL is the member's peer address.
func (s *Server) PeerURL() string { return s.peerURL }

// Err reports a fatal error of the running member.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the member; its data stays in DataDir.
func (s *Server) Close() { s.etcd.Close() }

// resolveURL parses raw, giving a free localhost port to an empty URL or
// port 0.
func resolveURL(raw string) (*url.URL, error) {
	if raw == "" {
		raw = "http://127.0.0.1:0"
	}
	if !strings.Contains(raw, "://") {
		// HOST:PORT, as the clients' --etcd-endpoints takes it.
		if _, _, err := net.SplitHostPort(raw); err != nil {
			return nil, fmt.Errorf("%q: want http://HOST:PORT, https://HOST:PORT or HOST:PORT", raw)
		}
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%q: want http://HOST:PORT, https://HOST:PORT or HOST:PORT", raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: scheme must be http or https", raw)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("%q: want http://HOST:PORT, https://HOST:PORT or HOST:PORT", raw)
	}
	if port == "0" {
		free, err := FreePort(host)
		if err != nil {
			return nil, err
		}
		u.Host = net.JoinHostPort(host, strconv.Itoa(free))
	}
	return u, nil
}

// FreePort asks the kernel for a TCP port that is free on host right now.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
