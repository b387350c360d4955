package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/membership"
)

// fromEnv returns the value of the first set variable of names, or def.
func fromEnv(env lookupEnv, def string, names ...string) string {
	for _, n := range names {
		if v, ok := env(n); ok && v != "" {
			return v
		}
	}
	return def
}

// envNote is the part of a flag's help that names its variables.
func envNote(names ...string) string {
	return " (env " + strings.Join(names, ", ") + ")"
}

// etcdFlags are the flags of every command that talks to etcd.
type etcdFlags struct {
	endpoints   string
	cacert      string
	cert        string
	key         string
	user        string
	password    string
	prefix      string
	dialTimeout time.Duration
	envErr      error // a variable that could not be read
	fs          *pflag.FlagSet
}

func (f *etcdFlags) register(fs *pflag.FlagSet, env lookupEnv) {
	f.fs = fs
	fs.StringVar(&f.endpoints, "etcd-endpoints", fromEnv(env, "", "ELASTIC_ETCD_ENDPOINTS", "PADDLE_ELASTIC_SERVER"),
		"comma-separated etcd endpoints, e.g. https://10.0.0.5:2379"+envNote("ELASTIC_ETCD_ENDPOINTS", "PADDLE_ELASTIC_SERVER"))
	fs.StringVar(&f.cacert, "cacert", fromEnv(env, "", "ELASTIC_ETCD_CACERT"), "verify etcd's certificate with this CA bundle"+envNote("ELASTIC_ETCD_CACERT"))
	fs.StringVar(&f.cert, "cert", fromEnv(env, "", "ELASTIC_ETCD_CERT"), "client certificate for etcd"+envNote("ELASTIC_ETCD_CERT"))
	fs.StringVar(&f.key, "key", fromEnv(env, "", "ELASTIC_ETCD_KEY"), "client key for etcd"+envNote("ELASTIC_ETCD_KEY"))
	fs.StringVar(&f.user, "user", fromEnv(env, "", "ELASTIC_ETCD_USER"), "etcd user; the password is read from ELASTIC_ETCD_PASSWORD"+envNote("ELASTIC_ETCD_USER"))
	fs.StringVar(&f.prefix, "prefix", fromEnv(env, membership.DefaultPrefix, "ELASTIC_PREFIX"), "root of the keys in etcd"+envNote("ELASTIC_PREFIX"))
	dial := 5 * time.Second
	if v := fromEnv(env, "", "ELASTIC_DIAL_TIMEOUT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			dial = d
		} else {
			f.envErr = fmt.Errorf("ELASTIC_DIAL_TIMEOUT %q: want a positive duration such as 10s", v)
		}
	}
	fs.DurationVar(&f.dialTimeout, "dial-timeout", dial, "how long to wait for etcd before giving up"+envNote("ELASTIC_DIAL_TIMEOUT"))
	f.password = fromEnv(env, "", "ELASTIC_ETCD_PASSWORD")
}

// keys validates the prefix.
func (f *etcdFlags) keys() (membership.Keys, error) {
	k, err := membership.NewKeys(f.prefix)
	if err != nil {
		return membership.Keys{}, usageError{fmt.Errorf("--prefix: %w", err)}
	}
	return k, nil
}

// client builds an etcd client from the flags and checks that etcd answers
// within the dial timeout, so that an unreachable etcd is one clear error.
func (f *etcdFlags) client(ctx context.Context) (*clientv3.Client, membership.Keys, error) {
	if f.envErr != nil && !f.fs.Changed("dial-timeout") {
		return nil, membership.Keys{}, usageError{f.envErr}
	}
	keys, err := f.keys()
	if err != nil {
		return nil, keys, err
	}
	var endpoints []string
	for _, e := range strings.Split(f.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			endpoints = append(endpoints, e)
		}
	}
	if len(endpoints) == 0 {
		return nil, keys, usagef("--etcd-endpoints is required (or ELASTIC_ETCD_ENDPOINTS, PADDLE_ELASTIC_SERVER)")
	}
	if f.user != "" && f.password == "" {
		return nil, keys, usagef("--user %s needs its password in ELASTIC_ETCD_PASSWORD", f.user)
	}
	tlsConfig, err := f.tls(endpoints)
	if err != nil {
		return nil, keys, err
	}
	cli, err := etcdclient.New(etcdclient.Config{
		Endpoints: endpoints, DialTimeout: f.dialTimeout, TLS: tlsConfig, Username: f.user, Password: f.password,
	})
	if err != nil {
		return nil, keys, fmt.Errorf("etcd client: %w", err)
	}
	// Status needs no permission on any key, so a user confined to one
	// job's prefix passes this check too.
	checkCtx, cancel := context.WithTimeout(ctx, f.dialTimeout)
	defer cancel()
	var lastErr error
	for _, e := range endpoints {
		if _, lastErr = cli.Status(checkCtx, e); lastErr == nil {
			return cli, keys, nil
		}
	}
	_ = cli.Close()
	return nil, keys, fmt.Errorf("etcd at %s: %w", strings.Join(endpoints, ","), explainEtcdError(lastErr))
}

func explainEtcdError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errors.New("unreachable (no answer within the dial timeout)")
	}
	return err
}

func (f *etcdFlags) tls(endpoints []string) (*tls.Config, error) {
	secure := f.cacert != "" || f.cert != ""
	for _, e := range endpoints {
		secure = secure || strings.HasPrefix(e, "https://")
	}
	if !secure {
		return nil, nil
	}
	if (f.cert == "") != (f.key == "") {
		return nil, usagef("--cert and --key go together")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.cacert != "" {
		pem, err := os.ReadFile(f.cacert)
		if err != nil {
			return nil, usagef("--cacert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("--cacert %s: no PEM certificate in it", f.cacert)
		}
		cfg.RootCAs = pool
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, usagef("--cert/--key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// jobFlag validates a --job value.
func jobFlag(job string) error {
	if job == "" {
		return usagef("--job is required (or ELASTIC_JOB_ID, PADDLE_ELASTIC_JOB_ID)")
	}
	if err := membership.ValidateJobID(job); err != nil {
		return usageError{fmt.Errorf("--job: %w", err)}
	}
	return nil
}

// npFlag parses an --np value.
func npFlag(np string) (membership.NP, error) {
	n, err := membership.ParseNP(np)
	if err != nil {
		return n, usageError{fmt.Errorf("--np: %w", err)}
	}
	return n, nil
}

// newLogger logs to w at the level named by level.
func newLogger(w io.Writer, name, level string) (hclog.Logger, error) {
	l := hclog.LevelFromString(level)
	if l == hclog.NoLevel {
		return nil, usagef("--log-level %q: want trace, debug, info, warn or error", level)
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: l, Output: w}), nil
}
