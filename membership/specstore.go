package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/english"
)

// SpecWrite is what a write of a job's spec stored.
type SpecWrite struct {
	Spec Spec
	// Before is the spec the write started from (the last good one when
	// the stored value was malformed); nil when the write created it.
	Before *Spec
	// Repaired, when not nil, says why the value the write replaced was
	// malformed: the write started from the last good spec instead
	// (Status.Spec).
	Repaired error
}

// ErrNoGoodSpec is returned for a job whose stored spec is malformed when
// no good one is known to start a change from.
var ErrNoGoodSpec = errors.New("membership: no good spec to start from")

// specBase is a job's spec as a writer starts from.
type specBase struct {
	spec Spec
	// rev is the spec key's ModRevision; 0 when the job has none.
	rev int64
	// malformed is why the stored value does not decode; spec is then
	// the last good one the coordinator keeps in the status.
	malformed error
}

// readSpecBase reads a job's spec to change it: the stored one, or while
// that is malformed the last good one (Status.Spec), read in the same
// transaction. A job with no spec has rev 0. A malformed spec with no good
// one behind it is ErrNoGoodSpec, with what to write instead.
func readSpecBase(ctx context.Context, cli *clientv3.Client, keys Keys, job string) (specBase, error) {
	key := keys.Spec(job)
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(keys.Status(job))).Commit()
	if err != nil {
		return specBase{}, fmt.Errorf("read spec: %w", err)
	}
	specs := resp.Responses[0].GetResponseRange().Kvs
	if len(specs) == 0 {
		return specBase{}, nil
	}
	b := specBase{rev: specs[0].ModRevision}
	if b.spec, b.malformed = DecodeSpec(specs[0].Value); b.malformed == nil {
		return b, nil
	}
	if statuses := resp.Responses[1].GetResponseRange().Kvs; len(statuses) == 1 {
		if s, err := DecodeStatus(statuses[0].Value); err == nil && s.Spec != nil {
			b.spec = *s.Spec
			return b, nil
		}
	}
	return specBase{}, fmt.Errorf("%w: the stored spec of job %s is malformed (%s), and no good one is known (a coordinator keeps the last good spec in the job's status once it has run the job): write a valid one to %s, such as {\"np\":\"2\"}, or delete the job",
		ErrNoGoodSpec, job, english.OneLine(b.malformed.Error()), key)
}

// UpdateSpec changes a job's spec with fn in a compare-and-swap loop, or
// creates it as initial when the job has none; an error of fn refuses the
// change and is returned. A stored spec that is malformed is replaced by
// fn applied to the last good one (Status.Spec), and the result says so;
// with no good one it is ErrNoGoodSpec.
func UpdateSpec(ctx context.Context, cli *clientv3.Client, keys Keys, job string, fn func(*Spec) error, initial Spec) (SpecWrite, error) {
	if err := ValidateJobID(job); err != nil {
		return SpecWrite{}, err
	}
	key := keys.Spec(job)
	for {
		base, err := readSpecBase(ctx, cli, keys, job)
		if err != nil {
			return SpecWrite{}, err
		}
		next := initial
		if next.CreatedAt.IsZero() {
			next.CreatedAt = time.Now().UTC().Truncate(time.Second)
		}
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if base.rev != 0 {
			next = base.spec
			if err := fn(&next); err != nil {
				return SpecWrite{}, err
			}
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", base.rev)
		}
		if err := next.Validate(); err != nil {
			return SpecWrite{}, err
		}
		val, err := Encode(next)
		if err != nil {
			return SpecWrite{}, err
		}
		txn, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, val)).Commit()
		if err != nil {
			return SpecWrite{}, fmt.Errorf("write spec: %w", err)
		}
		if txn.Succeeded {
			w := SpecWrite{Spec: next, Repaired: base.malformed}
			if base.rev != 0 {
				w.Before = &base.spec
			}
			return w, nil
		}
	}
}

// CreateSpec stores spec as the job's spec unless the job has one, and
// returns the spec in effect. It never writes over a stored spec, even a
// malformed one: that is ErrInvalidRecord.
func CreateSpec(ctx context.Context, cli *clientv3.Client, keys Keys, job string, spec Spec) (Spec, error) {
	if err := ValidateJobID(job); err != nil {
		return Spec{}, err
	}
	if err := spec.Validate(); err != nil {
		return Spec{}, err
	}
	if spec.CreatedAt.IsZero() {
		spec.CreatedAt = time.Now().UTC().Truncate(time.Second)
	}
	val, err := Encode(spec)
	if err != nil {
		return Spec{}, err
	}
	key := keys.Spec(job)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return Spec{}, fmt.Errorf("write spec: %w", err)
	}
	if resp.Succeeded {
		return spec, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 { // deleted meanwhile: try again
		return CreateSpec(ctx, cli, keys, job, spec)
	}
	return DecodeSpec(kvs[0].Value)
}

// NoKeysUnder is a transaction condition that holds while no key has the
// prefix: every key in the range is compared, and an empty range compares
// as one key never created.
func NoKeysUnder(prefix string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(prefix), "=", 0).WithPrefix()
}
