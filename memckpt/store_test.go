package memckpt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func putCopy(t *testing.T, s *store, gen, seq int64, size int) bool {
	t.Helper()
	r, err := s.reserve(t.Context(), int64(size))
	require.NoError(t, err)
	body := make([]byte, size)
	return s.put(&Copy{Meta: Meta{Job: "j", Generation: gen, Seq: seq, Size: int64(size), CRC32: checksum(body)}, Body: body}, r)
}

func TestTheStoreKeepsTheNewestCopiesWithinItsBounds(t *testing.T) {
	s := newStore(2, 100)
	assert.True(t, putCopy(t, s, 1, 1, 10))
	assert.True(t, putCopy(t, s, 1, 2, 10))
	assert.True(t, putCopy(t, s, 2, 1, 10), "a later generation is newer")
	assert.False(t, putCopy(t, s, 1, 1, 10), "older than every copy kept")
	bytes, copies := s.usage()
	assert.Equal(t, int64(20), bytes)
	assert.Equal(t, 2, copies)
	assert.Equal(t, int64(2), s.newest("").Generation)

	// A copy of half the memory makes room by dropping all but the newest.
	assert.True(t, putCopy(t, s, 2, 2, 50))
	assert.Equal(t, int64(2), s.newest("").Seq)

	_, err := s.reserve(t.Context(), 51)
	var tooLarge *TooLargeError
	require.ErrorAs(t, err, &tooLarge)
	assert.Equal(t, &TooLargeError{Size: 51, Memory: 100}, tooLarge)
}

func TestAReservationWaitsForRoom(t *testing.T) {
	s := newStore(2, 100)
	first, err := s.reserve(t.Context(), 50)
	require.NoError(t, err)
	second, err := s.reserve(t.Context(), 50)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err = s.reserve(ctx, 10)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "no room while two copies arrive")
	got := make(chan error, 1)
	go func() {
		r, err := s.reserve(t.Context(), 10)
		if err == nil {
			r.release()
		}
		got <- err
	}()
	first.release()
	require.NoError(t, <-got)
	second.release()
	second.release() // twice is harmless
	b, _ := s.usage()
	assert.Zero(t, b)
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1GiB": 1 << 30, "512MiB": 512 << 20, "2G": 2 << 30, "1000": 1000, "3 MB": 3e6, "0": 0} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "x", "-1", "1.5GiB", "99999999999TiB"} {
		_, err := ParseSize(in)
		assert.Error(t, err, in)
	}
	assert.Equal(t, "1GiB", FormatSize(1<<30))
	assert.Equal(t, "1.5MiB", FormatSize(3<<19))
}
