package presence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// Update is one step of Follow. When Reset is set, Changes is the complete
// listing of the range at Revision and replaces whatever the handler held;
// otherwise Changes are the puts and deletes since the previous Update.
type Update struct {
	Reset    bool
	Revision int64
	Changes  []membership.KeyValue
}

// Range names the keys to follow: one key, or every key under a prefix
// ending in "/".
type Range struct {
	Key    string
	Prefix bool
}

// Follow lists the range and then watches it from the next revision, calling
// handle with every change, until ctx is done or handle fails. It cannot miss
// an event silently: when the watch is compacted past, cancelled by the
// server or broken, it lists the range again and hands the handler a Reset.
// It returns ctx's error or the handler's.
func Follow(ctx context.Context, cli *clientv3.Client, r Range, logger hclog.Logger, handle func(Update) error) error {
	if r.Prefix && (r.Key == "" || r.Key[len(r.Key)-1] != '/') {
		return fmt.Errorf("follow %q: a prefix must end in '/'", r.Key)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	var opts []clientv3.OpOption
	if r.Prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	retry := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(0))
	for {
		err := followOnce(ctx, cli, r, opts, logger, handle)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var herr handlerError
		if errors.As(err, &herr) {
			return herr.err
		}
		wait := retry.NextBackOff()
		logger.Debug("watch interrupted; listing again", "key", r.Key, "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

type handlerError struct{ err error }

func (e handlerError) Error() string { return e.err.Error() }

// followOnce lists and watches until the watch ends; the error says why.
func followOnce(ctx context.Context, cli *clientv3.Client, r Range, opts []clientv3.OpOption, logger hclog.Logger, handle func(Update) error) error {
	resp, err := cli.Get(ctx, r.Key, opts...)
	if err != nil {
		return fmt.Errorf("list %s: %w", r.Key, err)
	}
	listing := Update{Reset: true, Revision: resp.Header.Revision, Changes: make([]membership.KeyValue, 0, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		listing.Changes = append(listing.Changes, membership.KeyValue{
			Key: string(kv.Key), Value: kv.Value,
			CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Lease: clientv3.LeaseID(kv.Lease),
		})
	}
	if err := handle(listing); err != nil {
		return handlerError{err}
	}

	watchCtx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	watchOpts := append([]clientv3.OpOption{clientv3.WithRev(resp.Header.Revision + 1)}, opts...)
	for wresp := range cli.Watch(watchCtx, r.Key, watchOpts...) {
		if wresp.CompactRevision != 0 {
			return fmt.Errorf("watch compacted at revision %d", wresp.CompactRevision)
		}
		if err := wresp.Err(); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		if len(wresp.Events) == 0 {
			continue // progress notification
		}
		update := Update{Revision: wresp.Header.Revision, Changes: make([]membership.KeyValue, 0, len(wresp.Events))}
		for _, ev := range wresp.Events {
			update.Changes = append(update.Changes, membership.KeyValue{
				Key: string(ev.Kv.Key), Value: ev.Kv.Value,
				CreateRevision: ev.Kv.CreateRevision, ModRevision: ev.Kv.ModRevision, Lease: clientv3.LeaseID(ev.Kv.Lease),
				Deleted: ev.Type == clientv3.EventTypeDelete,
			})
		}
		if err := handle(update); err != nil {
			return handlerError{err}
		}
	}
	return errors.New("watch channel closed")
}
