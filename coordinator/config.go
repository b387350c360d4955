package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// Defaults of Config.
const (
	DefaultSessionTTL     = 5 * time.Second
	DefaultSettleWindow   = time.Second
	DefaultStopTimeout    = 30 * time.Second
	DefaultEventRetention = 24 * time.Hour
	// DefaultFinishedJobRetention is how long serve keeps a finished
	// job's keys.
	DefaultFinishedJobRetention = 24 * time.Hour
)

// Config configures a coordinator replica.
type Config struct {
	// Client talks to etcd. Required.
	Client *clientv3.Client
	// Keys is the key schema; DefaultKeys if zero.
	Keys membership.Keys
	// ID names the replica in the election; random if empty.
	ID string
	// SessionTTL is the TTL of the election lease: how long a crashed
	// leader keeps the lead. At least membership.MinTTL.
	SessionTTL time.Duration
	// SettleWindow is how long a job with an np range waits for more nodes
	// before running below its maximum.
	SettleWindow time.Duration
	// StopTimeout is how long a node may take to ack a stop before its
	// lease is revoked.
	StopTimeout time.Duration
	// EventRetention is how long a job's events are kept.
	EventRetention time.Duration
	// FinishedJobRetention is how long a job's keys are kept after it
	// ended, unless a Kubernetes resource runs it; 0 keeps them.
	FinishedJobRetention time.Duration
	Logger               hclog.Logger
	// TableChunkBytes is the most a stored rank table chunk holds;
	// membership.TableChunkBytes if zero. Tests make it small to store
	// tables in many chunks.
	TableChunkBytes int
	// Registerer receives the coordinator's metrics; none if nil.
	Registerer prometheus.Registerer
	// LeaderTasks run on the leader only, for as long as it leads, such as
	// the Kubernetes bridge.
	LeaderTasks []LeaderTask
}

// LeaderTask is work that only the leader does. Lead runs until ctx ends,
// which happens when the lead is lost; an error makes it start again after
// a backoff while the lead lasts. presence.LeaderFence(ctx) is the
// comparison its etcd transactions add so as to fail once the lead is lost.
type LeaderTask interface {
	Lead(ctx context.Context) error
}

func (c *Config) setDefaults() error {
	if c.Client == nil {
		return errors.New("coordinator: no etcd client")
	}
	if c.Keys == (membership.Keys{}) {
		c.Keys = membership.DefaultKeys()
	}
	if c.ID == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.ID = "coordinator-" + hex.EncodeToString(b)
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.SessionTTL < presence.MinTTL {
		return fmt.Errorf("coordinator: session ttl %s is below the minimum of %s", c.SessionTTL, presence.MinTTL)
	}
	if c.SettleWindow == 0 {
		c.SettleWindow = DefaultSettleWindow
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.EventRetention == 0 {
		c.EventRetention = DefaultEventRetention
	}
	if c.SettleWindow < 0 || c.StopTimeout < 0 || c.EventRetention < 2*time.Second || c.FinishedJobRetention < 0 {
		return errors.New("coordinator: settle window, stop timeout and finished job retention must not be negative, event retention at least 2s")
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return nil
}
