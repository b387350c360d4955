package memckpt

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
)

// BenchmarkReplicate is one push of the newest copy to a peer, as the push
// loop makes it: over TLS, into the peer's store once its checksum matches.
func BenchmarkReplicate(b *testing.B) {
	srv := etcdtest.Start(b)
	cli := srv.Client(b)
	for _, size := range []int{4 << 20, 50 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			n := &testNode{}
			peer, err := New(b.Context(), Config{Job: "job", NodeID: "b", Client: cli, Memory: 1 << 30, Listen: "127.0.0.1:0",
				Host: "127.0.0.1", ModuleDir: b.TempDir()})
			require.NoError(b, err)
			peer.Start(n)
			defer peer.Close()
			secret, err := JobSecret(b.Context(), cli, peer.cfg.Keys, "job")
			require.NoError(b, err)
			a, err := newAuth("job", secret)
			require.NoError(b, err)
			conn, err := a.dial(b.Context(), peer.Addr())
			require.NoError(b, err)
			defer conn.Close()
			body := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := range b.N {
				c := &Copy{Meta: Meta{Job: "job", Generation: 1, Seq: int64(i + 1), Node: "a", Size: int64(size), CRC32: checksum(body)}, Body: body}
				if err := push(conn, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkChecksum is what a stored copy costs the sidecar besides the
// copy from the socket.
func BenchmarkChecksum(b *testing.B) {
	body := make([]byte, 4<<20)
	b.SetBytes(int64(len(body)))
	for range b.N {
		checksum(body)
	}
}
