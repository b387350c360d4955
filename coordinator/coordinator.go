package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/elastictraining/coordinator/membership"
)

// ErrNotLeader is returned when a fenced write finds that this replica no
// longer holds the election key.
var ErrNotLeader = errors.New("coordinator: not leader")

// Coordinator is one replica of the coordinator. Any number may run; the
// one elected through etcd's concurrency.Election acts, the others wait.
type Coordinator struct {
	cfg     Config
	logger  hclog.Logger
	metrics *metrics
	leading atomic.Bool
	// goneLeases outlives terms: see its type.
	goneLeases *goneLeases
	// tables are the rank tables decoded last, shared by the jobs' actors
	// and kept across terms.
	tables *membership.TableCache
	// now is the one clock of every time a decision compares: when an ack
	// was seen, when a lease was seen gone, the decision's now.
	now func() time.Time
}

// New validates cfg and fills its defaults.
func New(cfg Config) (*Coordinator, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("coordinator: register metrics: %w", err)
	}
	return &Coordinator{cfg: cfg, logger: cfg.Logger.Named("coordinator").With("replica", cfg.ID), metrics: m, goneLeases: newGoneLeases(),
		tables: &membership.TableCache{}, now: time.Now}, nil
}

// IsLeader reports whether this replica leads right now.
func (c *Coordinator) IsLeader() bool { return c.leading.Load() }

// Run campaigns for the lead and, while it leads, reconciles every job. It
// returns when ctx is done, resigning the lead if it holds it.
func (c *Coordinator) Run(ctx context.Context) error {
	retry := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(0))
	for {
		led, err := c.campaignAndLead(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if led {
			retry.Reset()
		}
		wait := retry.NextBackOff()
		c.logger.Warn("lost or could not take the lead; campaigning again", "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// campaignAndLead runs one election session: campaign, lead until the
// session or ctx ends, resign. It reports whether it led.
func (c *Coordinator) campaignAndLead(ctx context.Context) (bool, error) {
	session, err := concurrency.NewSession(c.cfg.Client,
		concurrency.WithTTL(int(c.cfg.SessionTTL/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return false, fmt.Errorf("election session: %w", err)
	}
	defer func() {
		// Closing revokes the session lease, so the next replica takes over
		// at once instead of after a TTL.
		session.Orphan()
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = c.cfg.Client.Revoke(closeCtx, session.Lease())
	}()

	election := concurrency.NewElection(session, c.cfg.Keys.Leader())
	// Leader-only work derives from the session: losing the lease cancels it.
	leadCtx := session.Ctx()
	if err := election.Campaign(leadCtx, c.cfg.ID); err != nil {
		return false, fmt.Errorf("campaign: %w", err)
	}
	select {
	case <-session.Done():
		return false, errors.New("election session expired while campaigning")
	default:
	}

	c.leading.Store(true)
	c.metrics.leader.Set(1)
	defer func() {
		c.leading.Store(false)
		c.metrics.leader.Set(0)
	}()
	c.logger.Info("leading", "election_key", election.Key(), "revision", election.Rev())
	t := newTerm(c, election.Key(), election.Rev())
	err = t.run(leadCtx)
	c.logger.Info("stepped down", "error", err)
	return true, err
}
