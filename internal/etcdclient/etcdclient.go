package etcdclient

import (
	"crypto/tls"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

// Config says how to reach etcd.
type Config struct {
	Endpoints []string
	// DialTimeout bounds the first connection; 5 s if zero.
	DialTimeout time.Duration
	// TLS, if set, secures the connection (and may carry a client
	// certificate).
	TLS *tls.Config
	// Username and Password authenticate with etcd's auth, if set.
	Username string
	Password string
	// Logger receives the client's own log; silent if nil.
	Logger *zap.Logger
}

// New returns a client of the endpoints. Like clientv3.New it does not wait
// for a connection; the first request does.
func New(cfg Config) (*clientv3.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("no etcd endpoints")
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	reconnect := grpcbackoff.DefaultConfig
	reconnect.BaseDelay = 100 * time.Millisecond
	reconnect.MaxDelay = time.Second
	return clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		TLS:                  cfg.TLS,
		Username:             cfg.Username,
		Password:             cfg.Password,
		Logger:               cfg.Logger,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: reconnect, MinConnectTimeout: 2 * time.Second,
		})},
	})
}
