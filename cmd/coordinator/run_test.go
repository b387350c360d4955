//go:build !sidecaronly

package main

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A SIGPIPE says nothing of which output broke (a client of run's etcd
// that went, say): it neither stops run nor counts as a signal. run's own
// output gone stops it, as a first signal, once.
func TestRunStopsForItsOwnOutputOnly(t *testing.T) {
	ctx, signals := signalContext(t.Context())
	defer signals.stop()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGPIPE))
	assert.Never(t, func() bool { return ctx.Err() != nil }, 500*time.Millisecond, 10*time.Millisecond, "a SIGPIPE stopped run")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT did not stop run")
	}
	assert.Equal(t, syscall.SIGINT, signals.first(), "SIGPIPE came first and was dropped")

	ctx, signals = signalContext(t.Context())
	defer signals.stop()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	require.NoError(t, r.Close())
	out := &pipeOutput{w: w, gone: signals.outputGone}
	for range 3 {
		n, err := out.Write([]byte("line\n"))
		assert.NoError(t, err, "what is written once the reader went is dropped")
		assert.Equal(t, 5, n)
	}
	<-ctx.Done()
	assert.Equal(t, syscall.SIGPIPE, signals.first())
	select {
	case <-signals.again:
		t.Fatal("the output going twice is not a second signal")
	default:
	}
}
