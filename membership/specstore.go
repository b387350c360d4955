package membership

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// UpdateSpec changes a job's spec with fn in a compare-and-swap loop, or
// creates it as initial when the job has none.
func UpdateSpec(ctx context.Context, cli *clientv3.Client, keys Keys, job string, fn func(*Spec), initial Spec) (Spec, error) {
	if err := ValidateJobID(job); err != nil {
		return Spec{}, err
	}
	key := keys.Spec(job)
	for {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			return Spec{}, fmt.Errorf("read spec: %w", err)
		}
		next := initial
		if next.CreatedAt.IsZero() {
			next.CreatedAt = time.Now().UTC().Truncate(time.Second)
		}
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if len(resp.Kvs) == 1 {
			if next, err = DecodeSpec(resp.Kvs[0].Value); err != nil {
				return Spec{}, fmt.Errorf("stored spec of job %s is malformed, fix or delete %s: %w", job, key, err)
			}
			fn(&next)
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
		}
		if err := next.Validate(); err != nil {
			return Spec{}, err
		}
		val, err := Encode(next)
		if err != nil {
			return Spec{}, err
		}
		txn, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, val)).Commit()
		if err != nil {
			return Spec{}, fmt.Errorf("write spec: %w", err)
		}
		if txn.Succeeded {
			return next, nil
		}
	}
}

// CreateSpec stores spec as the job's spec unless the job has one, and
// returns the spec in effect.
func CreateSpec(ctx context.Context, cli *clientv3.Client, keys Keys, job string, spec Spec) (Spec, error) {
	if err := ValidateJobID(job); err != nil {
		return Spec{}, err
	}
	return UpdateSpec(ctx, cli, keys, job, func(*Spec) {}, spec)
}

// NoKeysUnder is a transaction condition that holds while no key has the
// prefix: every key in the range is compared, and an empty range compares
// as one key never created.
func NoKeysUnder(prefix string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(prefix), "=", 0).WithPrefix()
}
