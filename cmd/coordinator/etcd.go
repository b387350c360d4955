//go:build !sidecaronly

package main

import (
	"fmt"
	"net/url"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/elastictraining/coordinator/internal/embedetcd"
)

func newEtcdCommand(env lookupEnv) *cobra.Command {
	var cfg embedetcd.Config
	cmd := &cobra.Command{
		Use:   "etcd --data-dir DIR [--listen-client-urls URL] [--name NAME --initial-cluster NAME=URL,...]",
		Short: "Run a real etcd server, alone or as a member of a cluster",
		Long: `etcd runs a real etcd server (the etcd project's own server, embedded) for
clusters that have none. Alone it is a single member; with --initial-cluster
it is one member of a cluster (three tolerate the loss of one), and the peer
flags mean what they mean to etcd. Clients and peers get TLS when given a
certificate. It serves until SIGTERM or SIGINT; its data stays in --data-dir,
and a member restarted on its data rejoins its cluster whatever
--initial-cluster-state says.`,
		Example: `  coordinator etcd --data-dir /var/lib/elastic-etcd --listen-client-urls http://0.0.0.0:2379
  coordinator etcd --listen-client-urls https://0.0.0.0:2379 --cert-file server.crt --key-file server.key \
      --trusted-ca-file ca.crt --client-cert-auth

  # one of three members (run the same on etcd-1 and etcd-2 with their own name and URLs)
  coordinator etcd --name etcd-0 --data-dir /var/lib/etcd \
      --listen-client-urls https://0.0.0.0:2379 --advertise-client-urls https://etcd-0:2379 \
      --listen-peer-urls https://0.0.0.0:2380 --initial-advertise-peer-urls https://etcd-0:2380 \
      --initial-cluster etcd-0=https://etcd-0:2380,etcd-1=https://etcd-1:2380,etcd-2=https://etcd-2:2380 \
      --peer-cert-file peer.crt --peer-key-file peer.key --peer-trusted-ca-file ca.crt --peer-client-cert-auth \
      --cert-file server.crt --key-file server.key --trusted-ca-file ca.crt --client-cert-auth`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.DataDir == "" {
				return usagef("--data-dir is required")
			}
			if cfg.HistoryRetention <= 0 || cfg.QuotaBytes <= 0 {
				return usagef("--auto-compaction-retention and --quota-backend-bytes must be positive")
			}
			if (cfg.CertFile == "") != (cfg.KeyFile == "") {
				return usagef("--cert-file and --key-file go together")
			}
			if (cfg.PeerCertFile == "") != (cfg.PeerKeyFile == "") {
				return usagef("--peer-cert-file and --peer-key-file go together")
			}
			if cfg.ClusterState != "new" && cfg.ClusterState != "existing" {
				return usagef("--initial-cluster-state %q: want new or existing", cfg.ClusterState)
			}
			if cfg.InitialCluster != "" && !strings.Contains(cfg.InitialCluster, cfg.Name+"=") {
				return usagef("--initial-cluster %q does not name this member (--name %s)", cfg.InitialCluster, cfg.Name)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			srv, err := embedetcd.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer srv.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "etcd serving clients at %s (member %s, data in %s)\n", srv.ClientURL(), cfg.Name, cfg.DataDir)
			select {
			case <-ctx.Done():
				return nil
			case err := <-srv.Err():
				return fmt.Errorf("etcd stopped: %w", err)
			}
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.DataDir, "data-dir", fromEnv(env, "", "ELASTIC_ETCD_DATA_DIR"), "directory of the member's data (required)"+envNote("ELASTIC_ETCD_DATA_DIR"))
	fs.StringVar(&cfg.ClientURL, "listen-client-urls", "http://127.0.0.1:2379", "URL to serve clients on; https needs --cert-file and --key-file")
	fs.StringVar(&cfg.AdvertiseClientURL, "advertise-client-urls", "", "client URL to advertise; --listen-client-urls if empty")
	fs.StringVar(&cfg.PeerURL, "listen-peer-urls", "http://127.0.0.1:2380", "URL of the member's peer port; https needs --peer-cert-file and --peer-key-file")
	fs.StringVar(&cfg.AdvertisePeerURL, "initial-advertise-peer-urls", "", "peer URL the other members reach this one at; --listen-peer-urls if empty")
	fs.StringVar(&cfg.Name, "name", "default", "member name")
	fs.StringVar(&cfg.MetricsURL, "listen-metrics-urls", "", "plain http URL for /metrics, /health and /readyz, for probes (e.g. http://0.0.0.0:2381)")
	fs.DurationVar(&cfg.HistoryRetention, "auto-compaction-retention", embedetcd.DefaultHistoryRetention,
		"history kept before it is compacted: every membership change writes a revision per node, which nothing needs once the watchers have it")
	fs.Int64Var(&cfg.QuotaBytes, "quota-backend-bytes", embedetcd.DefaultQuotaBytes, "the database's size limit, past which etcd refuses writes")
	fs.StringVar(&cfg.LogLevel, "log-level", "warn", "etcd's own log level: debug, info, warn or error")
	fs.StringVar(&cfg.InitialCluster, "initial-cluster", "", "every member of a new cluster as NAME=PEER_URL,...; this member alone if empty")
	fs.StringVar(&cfg.ClusterState, "initial-cluster-state", "new", "new to form the cluster, existing to join one that runs (after `etcdctl member add`)")
	fs.StringVar(&cfg.ClusterToken, "initial-cluster-token", "", "token that keeps clusters formed from the same peer URLs apart")
	fs.StringVar(&cfg.PeerCertFile, "peer-cert-file", "", "certificate for the peer URL")
	fs.StringVar(&cfg.PeerKeyFile, "peer-key-file", "", "key for the peer URL")
	fs.StringVar(&cfg.PeerTrustedCAFile, "peer-trusted-ca-file", "", "CA that signs the peers' certificates")
	fs.BoolVar(&cfg.PeerClientCertAuth, "peer-client-cert-auth", false, "require peers to present a certificate signed by --peer-trusted-ca-file")
	fs.StringVar(&cfg.CertFile, "cert-file", "", "server certificate for the client URL")
	fs.StringVar(&cfg.KeyFile, "key-file", "", "server key for the client URL")
	fs.StringVar(&cfg.TrustedCAFile, "trusted-ca-file", "", "CA that signs client certificates")
	fs.BoolVar(&cfg.ClientCertAuth, "client-cert-auth", false, "require a client certificate signed by --trusted-ca-file")
	checkEtcdValues(fs, &cfg)
	return cmd
}

// checkEtcdValues has the values given to etcd's string flags checked
// before it starts.
func checkEtcdValues(fs *pflag.FlagSet, cfg *embedetcd.Config) {
	for flag, url := range map[string]*string{"listen-client-urls": &cfg.ClientURL, "listen-peer-urls": &cfg.PeerURL} {
		checkGiven(fs, flag, func() error { return checkEtcdURL("--"+flag, *url, true, "http", "https") })
	}
	for flag, url := range map[string]*string{"advertise-client-urls": &cfg.AdvertiseClientURL, "initial-advertise-peer-urls": &cfg.AdvertisePeerURL} {
		checkGiven(fs, flag, func() error { return checkEtcdURL("--"+flag, *url, false, "http", "https") })
	}
	checkGiven(fs, "listen-metrics-urls", func() error { return checkEtcdURL("--listen-metrics-urls", cfg.MetricsURL, false, "http") })
	for flag, file := range map[string]*string{"cert-file": &cfg.CertFile, "key-file": &cfg.KeyFile, "trusted-ca-file": &cfg.TrustedCAFile,
		"peer-cert-file": &cfg.PeerCertFile, "peer-key-file": &cfg.PeerKeyFile, "peer-trusted-ca-file": &cfg.PeerTrustedCAFile} {
		checkGiven(fs, flag, func() error { return checkFile("--"+flag, *file) })
	}
	checkGiven(fs, "initial-cluster", func() error { return checkInitialCluster(cfg.InitialCluster) })
	checkGiven(fs, "initial-cluster-state", func() error {
		return checkChoice("--initial-cluster-state", cfg.ClusterState, "new or existing", "new", "existing")
	})
	checkGiven(fs, "log-level", func() error {
		return checkChoice("--log-level", cfg.LogLevel, "debug, info, warn or error", "debug", "info", "warn", "error")
	})
}

// checkEtcdURL checks a URL of etcd's, given to flag: SCHEME://HOST:PORT,
// of one of schemes, or HOST:PORT alone where bare (for http); "" is none.
func checkEtcdURL(flag, value string, bare bool, schemes ...string) error {
	if value == "" {
		return nil
	}
	hostport := value
	if bare && !strings.Contains(value, "://") {
		value = "http://" + value
	}
	want := strings.Join(schemes, "://HOST:PORT or ") + "://HOST:PORT"
	if bare {
		want += ", or HOST:PORT"
	}
	u, err := url.Parse(value)
	if err != nil || !slices.Contains(schemes, u.Scheme) || checkListenAddress(flag, u.Host) != nil || u.Host == "" {
		return usagef("%s %q: want %s", flag, hostport, want)
	}
	return nil
}

// checkInitialCluster checks --initial-cluster: NAME=URL,...
func checkInitialCluster(list string) error {
	if list == "" {
		return nil // this member alone
	}
	for _, member := range strings.Split(list, ",") {
		name, peer, ok := strings.Cut(member, "=")
		if !ok || name == "" || checkEtcdURL("--initial-cluster", peer, false, "http", "https") != nil {
			return usagef("--initial-cluster %q: want NAME=URL,... such as e0=http://10.0.0.1:2380,e1=http://10.0.0.2:2380", list)
		}
	}
	return nil
}
