package integration

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
)

// chromium runs Debian's chromium headless on url with args (--dump-dom,
// --screenshot=FILE) and returns what it printed on stdout.
func chromium(t *testing.T, url string, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil && os.Getenv("CI") == "" {
		t.Skipf("chromium is missing (apt-get install chromium): %v", err)
	}
	require.NoError(t, err, "chromium missing: .ci/run installs Debian's chromium")
	// The browser itself sometimes crashes at start on a busy machine (a
	// segmentation fault before it loads anything): that says nothing of
	// the page, so a crash by a signal is tried again, twice at most.
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, path, append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
			"--user-data-dir=" + t.TempDir(), "--window-size=1100,1400"}, append(args, url)...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ProcessState != nil && ctx.Err() == nil && attempt < 3 {
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Logf("chromium crashed (%v); trying again", err)
				continue
			}
		}
		require.NoError(t, err, "chromium %v:\n%s", args, stderr.String())
		return stdout.String()
	}
}

// httpGet gets url without following redirects.
func httpGet(url string) (int, string, error) {
	client := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestJobPagesInABrowser: serve's read-only pages, loaded in a real
// headless chromium, list a running job, show its nodes and events, and
// draw its timeline (the browser decodes the SVG); a job's name leads to
// its id, an unknown job is 404. The screenshot's path is in the output.
func TestJobPagesInABrowser(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	addr := "127.0.0.1:" + freePort(t)
	background(t, nil, "serve", "--etcd-endpoints", srv.Endpoint(), "--listen-metrics", addr)
	for i := range 2 {
		background(t, []string{"TOY_DIR=" + t.TempDir(), "TOY_STEPS=10000", "TOY_INTERVAL=0.1"},
			"sidecar", "--etcd-endpoints", srv.Endpoint(), "--job_id", "Web_Job", "--np", "2", "--host", "127.0.0.1",
			"--node-id", "web-"+string(rune('a'+i)), "--port", freePort(t), "--master-port", freePort(t), "--", "testdata/toytrainer.sh")
	}
	base := "http://" + addr
	var id string
	require.Eventually(t, func() bool {
		// The job's name leads to the page of its id.
		code, _, err := httpGet(base + "/jobs/Web_Job")
		if err != nil || code != http.StatusFound {
			return false
		}
		resp, err := http.Get(base + "/jobs/Web_Job")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		page, _ := io.ReadAll(resp.Body)
		id = strings.TrimPrefix(resp.Request.URL.Path, "/jobs/")
		return strings.Contains(string(page), `class="phase running">Running`) && strings.Count(string(page), "<td>running</td>") == 2
	}, 60*time.Second, 100*time.Millisecond, "the job runs and its page says so")
	assert.True(t, strings.HasPrefix(id, "web-job-"), "the name leads to the stored id, not %q", id)

	list := chromium(t, base+"/jobs", "--dump-dom")
	assert.Contains(t, list, `data-job="`+id+`"`)
	assert.Contains(t, list, "Web_Job")
	assert.Contains(t, list, `<td class="phase running">Running</td>`)

	page := chromium(t, base+"/jobs/"+id, "--dump-dom")
	assert.Contains(t, page, `data-node="web-a"`)
	assert.Contains(t, page, `data-node="web-b"`)
	assert.Contains(t, page, "GenerationRunning")
	assert.Regexp(t, `<dd id="goodput">\d+\.\d% of \S+ \(.*\); now training</dd>`, page, "the job's goodput")
	assert.Regexp(t, `<td class="num">\d+\.\d%</td>`, list, "its goodput in the list")
	assert.Contains(t, page, `data-drawn="960"`, "the browser drew the timeline:\n%s", page)

	shots := filepath.Join(os.TempDir(), "coordinator-test-screenshots")
	require.NoError(t, os.MkdirAll(shots, 0o755))
	shot := filepath.Join(shots, "job-page.png")
	chromium(t, base+"/jobs/"+id, "--screenshot="+shot)
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	assert.Equal(t, 1100, img.Bounds().Dx())
	t.Logf("screenshot of /jobs/%s: %s", id, shot)

	for path, want := range map[string]int{
		"/jobs/no-such-job":              http.StatusNotFound,
		"/jobs/no-such-job/timeline.svg": http.StatusNotFound,
		"/jobs/" + id + "/timeline.svg":  http.StatusOK,
		"/":                              http.StatusFound,
	} {
		code, body, err := httpGet(base + path)
		require.NoError(t, err)
		assert.Equal(t, want, code, "%s: %s", path, body)
		if want == http.StatusOK {
			assert.Contains(t, body, "<svg")
		}
	}
}
