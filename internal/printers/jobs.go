package printers

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// Head is what a job's status and its line in the list of jobs begin with,
// in their JSON too.
type Head struct {
	Job        string              `json:"job"`
	Name       string              `json:"name,omitempty"`
	Phase      membership.JobPhase `json:"phase"`
	Generation int64               `json:"generation"`
	NP         *NP                 `json:"np"`
	Members    int                 `json:"members"`
	Ready      int                 `json:"ready"`
}

func headOf(job string, s membership.Status) Head {
	return Head{Job: job, Phase: s.Phase, Generation: s.Generation, NP: newNP(s.NP), Members: s.Members, Ready: s.Ready}
}

// Job is one job of `jobs -o json`, and of the table and page that list
// the jobs.
type Job struct {
	Head
	Nodes    int64 `json:"nodes"`
	Restarts int   `json:"restarts"`
	// HangRestarts are the restarts hung ranks cost, beside Restarts.
	HangRestarts int        `json:"hangRestarts,omitempty"`
	Created      *time.Time `json:"created"`
	// Goodput is the share of the job's wall time that trained; nil
	// when it keeps no account.
	Goodput *float64 `json:"goodput"`
	Message string   `json:"message"`
}

// GoodputPercent is the job's goodput as tables show it: "97.3%", or "-".
func (j Job) GoodputPercent() string {
	if j.Goodput == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", *j.Goodput*100)
}

// NewJob is the job as the list of jobs shows it.
func NewJob(j jobclient.JobSummary) Job {
	v := Job{Head: headOf(j.ID, j.Status), Nodes: j.Nodes, Restarts: j.Status.Restarts, HangRestarts: j.Status.HangRestarts, Message: StatusMessage(j.Status)}
	if g := NewGoodput(j.Status.Goodput, time.Now()); g != nil && g.WallSeconds > 0 {
		v.Goodput = &g.Ratio
	}
	if j.Spec != nil {
		v.Name = j.Spec.Name
		if !j.Spec.CreatedAt.IsZero() {
			created := j.Spec.CreatedAt
			v.Created = &created
		}
	}
	return v
}

// WriteJobsJSON writes the jobs as `jobs -o json` prints them: one JSON
// array of Job.
func WriteJobsJSON(w io.Writer, jobs []jobclient.JobSummary) error {
	out := make([]Job, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, NewJob(j))
	}
	return WriteJSON(w, out)
}

// WriteJobsTable writes the jobs as `jobs` prints them, with their ages at
// now.
func WriteJobsTable(w io.Writer, jobs []jobclient.JobSummary, now time.Time) {
	if len(jobs) == 0 {
		fmt.Fprintln(w, "No jobs.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tPHASE\tGENERATION\tNP\tREADY\tNODES\tRESTARTS\tGOODPUT\tAGE")
	for _, j := range jobs {
		v := NewJob(j)
		name := v.Job
		if v.Name != "" {
			name = fmt.Sprintf("%s (%s)", v.Name, v.Job)
		}
		ready := "-"
		if v.Phase == membership.JobRunning || v.Phase == membership.JobRestarting {
			ready = fmt.Sprintf("%d/%d", v.Ready, v.Members)
		}
		goodput := "-"
		if g := NewGoodput(j.Status.Goodput, now); g != nil {
			goodput = g.Percent()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", name, v.Phase, v.Generation, v.NP.String(), ready, v.Nodes,
			RestartsCell(v.Restarts, v.HangRestarts), goodput, Age(v.Created, now))
	}
	tw.Flush()
}

// Age is how long ago created was at now, as ShortDuration writes it, and
// "-" when it is not known.
func Age(created *time.Time, now time.Time) string {
	if created == nil {
		return "-"
	}
	return ShortDuration(now.Sub(*created))
}

// ShortDuration renders an age as kubectl does: 45s, 12m, 3h, 5d.
func ShortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}
