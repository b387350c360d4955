package etcdprobe_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/elastictraining/coordinator/internal/etcdprobe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A sidecar started beside its etcd waits for it, within the dial timeout,
// instead of failing on the first refused connection.
func TestProbeWaitsForAnEtcdThatIsStarting(t *testing.T) {
	reserved, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := reserved.Addr().String()
	require.NoError(t, reserved.Close())

	endpoint := "http://" + addr
	_, err = etcdprobe.Endpoints(context.Background(), []string{endpoint}, nil, 300*time.Millisecond, etcdprobe.WaitForEtcd)
	require.Error(t, err, "nothing listens yet")
	assert.Equal(t, "unreachable: connection refused (nothing listens on "+addr+")", err.Error())

	started := make(chan struct{})
	go func() {
		time.Sleep(500 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			close(started)
			return
		}
		close(started)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"etcdserver":"3.6.0","etcdcluster":"3.6.0"}`))
		})}
		t.Cleanup(func() { _ = srv.Close() })
		_ = srv.Serve(l)
	}()
	found, err := etcdprobe.Endpoints(context.Background(), []string{endpoint}, nil, 10*time.Second, etcdprobe.WaitForEtcd)
	assert.NoError(t, err, "an etcd that starts within the dial timeout is found")
	assert.Equal(t, endpoint, found)
	<-started
}

// A command a person typed says at once that nothing listens, whatever the
// dial timeout.
func TestProbeFailsAtOnceForACommand(t *testing.T) {
	reserved, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := reserved.Addr().String()
	require.NoError(t, reserved.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = etcdprobe.Endpoints(ctx, []string{"http://" + addr}, nil, time.Hour, etcdprobe.FailAtOnce)
	require.NoError(t, ctx.Err(), "the probe waited")
	assert.EqualError(t, err, "unreachable: connection refused (nothing listens on "+addr+")")
}
