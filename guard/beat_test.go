package guard

import (
	"io"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestBeatCountsAStepOnTheInheritedPage(t *testing.T) {
	p, err := newProgressPage()
	require.NoError(t, err)
	defer p.close()
	env := func(fd int) func(string) string {
		return func(k string) string {
			if k == EnvProgressFD {
				return strconv.Itoa(fd)
			}
			return ""
		}
	}
	before := MonoNow()
	require.Equal(t, 0, BeatMain(nil, env(p.fd), io.Discard))
	require.Equal(t, 0, BeatMain([]string{"--step", "41"}, env(p.fd), io.Discard))
	pr := p.load()
	assert.Equal(t, int64(2), pr.Steps)
	step, counted := pr.step()
	assert.Equal(t, int64(41), step)
	assert.False(t, counted, "a step named")
	assert.GreaterOrEqual(t, pr.LastStep, before)
	assert.Equal(t, pr.LastStep, pr.LastActivity)

	// A descriptor that is not a page (the number reused for a file of
	// the user's) is left untouched, and so is a missing one.
	f, err := os.CreateTemp(t.TempDir(), "user")
	require.NoError(t, err)
	_, err = f.WriteString("the user's data")
	require.NoError(t, err)
	require.Equal(t, 0, BeatMain(nil, env(int(f.Fd())), io.Discard))
	data, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	assert.Equal(t, "the user's data", string(data))
	assert.Equal(t, 0, BeatMain(nil, env(9999), io.Discard))
	assert.Equal(t, 0, BeatMain(nil, func(string) string { return "" }, io.Discard), "outside a sidecar: nothing to do")

	// A page-sized memfd without the magic is not a page either.
	other, err := unix.MemfdCreate("elastic-progress", 0)
	require.NoError(t, err)
	defer unix.Close(other)
	require.NoError(t, unix.Ftruncate(other, pageSize))
	assert.Equal(t, 0, BeatMain(nil, env(other), io.Discard))

	assert.Equal(t, 2, BeatMain([]string{"--step", "-1"}, env(p.fd), io.Discard), "a bad step is a usage error")
	assert.Equal(t, 2, BeatMain([]string{"extra"}, env(p.fd), io.Discard))
	assert.Equal(t, int64(2), p.load().Steps, "and counts nothing")
}
