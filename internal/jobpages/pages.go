package jobpages

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/internal/printers"
	"github.com/elastictraining/coordinator/internal/timeline"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

//go:embed templates/*.html
var files embed.FS

var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"age":      printers.Age,
	"restarts": printers.RestartsCell,
	"np":       func(v *printers.NP) string { return v.String() },
	"steps":    printers.StepCells,
	"when":     printers.Timestamp,
	"lower":    func(p membership.JobPhase) string { return strings.ToLower(string(p)) },
}).ParseFS(files, "templates/*.html"))

// timeout bounds the reads of one page: a page that cannot be read says
// so rather than hanging the browser.
const timeout = 5 * time.Second

// Handler serves GET /jobs, /jobs/JOB and /jobs/JOB/timeline.svg, reading
// the jobs through client. A job's name as the user gave it (Resnet_50)
// redirects to the page of its id.
func Handler(client *jobclient.Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /jobs", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		jobs, err := client.Jobs(ctx)
		if err != nil {
			http.Error(w, english.OneLine(err.Error()), http.StatusServiceUnavailable)
			return
		}
		views := make([]printers.Job, 0, len(jobs))
		for _, j := range jobs {
			views = append(views, printers.NewJob(j))
		}
		renderPage(w, "jobs.html", map[string]any{"Jobs": views, "Now": time.Now()})
	})
	mux.HandleFunc("GET /jobs/{job}", withJob(func(ctx context.Context, w http.ResponseWriter, r *http.Request, id string) {
		// A job's name as the user gave it (Resnet_50) leads to its id.
		if stored, err := membership.JobIDFor(id); err == nil && stored != id {
			http.Redirect(w, r, "/jobs/"+stored, http.StatusFound)
			return
		}
		view, err := printers.LoadStatus(ctx, client, id)
		if err != nil {
			pageError(w, id, err)
			return
		}
		events, ok := jobEvents(ctx, w, client, id)
		if !ok {
			return
		}
		slices.Reverse(events) // newest first: what an operator looks for is what just happened
		renderPage(w, "job.html", map[string]any{"Job": view, "Events": events})
	}))
	mux.HandleFunc("GET /jobs/{job}/timeline.svg", withJob(func(ctx context.Context, w http.ResponseWriter, _ *http.Request, id string) {
		st, err := client.Status(ctx, id)
		if err != nil {
			pageError(w, id, err)
			return
		}
		events, ok := jobEvents(ctx, w, client, id)
		if !ok {
			return
		}
		name := id
		if spec, err := client.Spec(ctx, id); err == nil && spec.Name != "" {
			name = spec.Name
		}
		var svg bytes.Buffer
		job := timeline.Job{Title: "job " + name, Events: events, Account: st.Goodput, Now: time.Now()}
		if err := timeline.Plot(&svg, ".svg", job); err != nil {
			// No generation yet: nothing to draw.
			http.Error(w, english.OneLine(err.Error()), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "image/svg+xml")
		_, _ = w.Write(svg.Bytes())
	}))
	return mux
}

// withJob serves a page of the job in the path, its reads bounded by
// timeout.
func withJob(page func(ctx context.Context, w http.ResponseWriter, r *http.Request, id string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		page(ctx, w, r, r.PathValue("job"))
	}
}

// jobEvents reads a job's events, oldest first, or answers 503.
func jobEvents(ctx context.Context, w http.ResponseWriter, client *jobclient.Client, id string) ([]membership.Event, bool) {
	events, err := client.Events(ctx, id)
	if err != nil {
		http.Error(w, english.OneLine(err.Error()), http.StatusServiceUnavailable)
		return nil, false
	}
	return events, true
}

// pageError answers a job that is not there with 404 and anything else
// (etcd unreachable) with 503.
func pageError(w http.ResponseWriter, id string, err error) {
	if errors.Is(err, jobclient.ErrJobNotFound) || membership.ValidateJobID(id) != nil {
		http.Error(w, english.OneLine(err.Error()), http.StatusNotFound)
		return
	}
	http.Error(w, english.OneLine(err.Error()), http.StatusServiceUnavailable)
}

// renderPage renders a template whole before writing, so that a failure is
// an error status rather than half a page.
func renderPage(w http.ResponseWriter, name string, data any) {
	var page bytes.Buffer
	if err := templates.ExecuteTemplate(&page, name, data); err != nil {
		http.Error(w, english.OneLine(err.Error()), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(page.Bytes())
}
