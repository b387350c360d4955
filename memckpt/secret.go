package memckpt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// secretBytes is the length of a job's secret.
const secretBytes = 32

// JobSecret returns the job's secret, creating it if the job has none: the
// first sidecar to ask writes a random one, and every later one reads it.
// It lives under the job's prefix (membership.Keys.Secret), with no lease:
// it lasts as long as the job's records.
func JobSecret(ctx context.Context, cli *clientv3.Client, keys membership.Keys, job string) ([]byte, error) {
	if err := membership.ValidateJobID(job); err != nil {
		return nil, err
	}
	fresh := make([]byte, secretBytes)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	key := keys.Secret(job)
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, hex.EncodeToString(fresh))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("job secret: %w", err)
	}
	if resp.Succeeded {
		return fresh, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return nil, fmt.Errorf("job secret: %s vanished; try again", key)
	}
	secret, err := hex.DecodeString(string(kvs[0].Value))
	if err != nil || len(secret) < 16 {
		return nil, fmt.Errorf("job secret at %s: not a hex value of at least 16 bytes", key)
	}
	return secret, nil
}
