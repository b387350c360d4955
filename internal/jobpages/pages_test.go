package jobpages_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/elastictraining/coordinator/internal/jobpages"
	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// get serves one request and returns its status, Location and body.
func get(h http.Handler, path string) (int, string, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, rec.Header().Get("Location"), string(body)
}

// The pages answer what they can from etcd: the list (empty here), a
// job's name redirected to its id, a job that is not there as 404, and
// an etcd that is gone as 503, each error on one line. (The pages of a
// running job, in a browser, are tested in integration.)
func TestPagesAnswerFromEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	h := jobpages.Handler(jobclient.New(srv.Client(t), membership.DefaultKeys()))

	code, _, body := get(h, "/jobs")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "No jobs")

	id, err := membership.JobIDFor("Resnet_50")
	require.NoError(t, err)
	code, location, _ := get(h, "/jobs/Resnet_50")
	assert.Equal(t, http.StatusFound, code)
	assert.Equal(t, "/jobs/"+id, location)

	code, _, body = get(h, "/jobs/nope")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Equal(t, "job not found: nope\n", body)

	srv.Stop()
	code, _, body = get(h, "/jobs")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.NotContains(t, body, "jobclient: ")
}
