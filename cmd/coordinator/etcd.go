package main

import (
	"fmt"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/elastictraining/coordinator/internal/embedetcd"
)

func newEtcdCommand(env lookupEnv) *cobra.Command {
	var cfg embedetcd.Config
	cmd := &cobra.Command{
		Use:   "etcd [--data-dir DIR] [--listen-client-urls URL]",
		Short: "Run a real single-member etcd server",
		Long: `etcd runs a real etcd server (the etcd project's own server, embedded) for
clusters that have none: a single member, with TLS when given a certificate.
It serves until SIGTERM or SIGINT; its data stays in --data-dir.`,
		Example: `  coordinator etcd --data-dir /var/lib/elastic-etcd --listen-client-urls http://0.0.0.0:2379
  coordinator etcd --listen-client-urls https://0.0.0.0:2379 --cert-file server.crt --key-file server.key \
      --trusted-ca-file ca.crt --client-cert-auth`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.DataDir == "" {
				return usagef("--data-dir is required")
			}
			if (cfg.CertFile == "") != (cfg.KeyFile == "") {
				return usagef("--cert-file and --key-file go together")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			cfg.LogLevel = "warn"
			srv, err := embedetcd.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer srv.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "etcd serving clients at %s (data in %s)\n", srv.ClientURL(), cfg.DataDir)
			select {
			case <-ctx.Done():
				return nil
			case err := <-srv.Err():
				return fmt.Errorf("etcd stopped: %w", err)
			}
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.DataDir, "data-dir", fromEnv(env, "", "ELASTIC_ETCD_DATA_DIR"), "directory of the member's data"+envNote("ELASTIC_ETCD_DATA_DIR"))
	fs.StringVar(&cfg.ClientURL, "listen-client-urls", "http://127.0.0.1:2379", "URL to serve clients on; https needs --cert-file and --key-file")
	fs.StringVar(&cfg.AdvertiseClientURL, "advertise-client-urls", "", "client URL to advertise; --listen-client-urls if empty")
	fs.StringVar(&cfg.PeerURL, "listen-peer-urls", "http://127.0.0.1:2380", "URL of the member's peer port")
	fs.StringVar(&cfg.Name, "name", "default", "member name")
	fs.StringVar(&cfg.CertFile, "cert-file", "", "server certificate for the client URL")
	fs.StringVar(&cfg.KeyFile, "key-file", "", "server key for the client URL")
	fs.StringVar(&cfg.TrustedCAFile, "trusted-ca-file", "", "CA that signs client certificates")
	fs.BoolVar(&cfg.ClientCertAuth, "client-cert-auth", false, "require a client certificate signed by --trusted-ca-file")
	return cmd
}
