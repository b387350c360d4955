package localrun

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// settle is how long a generation runs before run says it does: one whose
// trainer fails at once is not announced as running before it fails, and
// the line that follows (the next generation's, or the job's end) says
// what happened. A job that succeeds meanwhile did run, and is said so.
const settle = time.Second

// progress prints one line per generation that runs for settle, and one
// when the job waits or ends.
type progress struct {
	out         io.Writer
	client      *jobclient.Client
	job         string
	lastPhase   membership.JobPhase
	lastRunning int64
	// pending is the line of the generation that runs, said once it has
	// run for settle (due), unless the job moves on first.
	pending string
	timer   *time.Timer
}

func newProgress(out io.Writer, client *jobclient.Client, job string) *progress {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &progress{out: out, client: client, job: job, timer: t}
}

// due fires when the pending line is to be said (flush).
func (p *progress) due() <-chan time.Time { return p.timer.C }

// flush says the pending line, if any.
func (p *progress) flush() {
	if p.pending != "" {
		fmt.Fprint(p.out, p.pending)
		p.pending = ""
	}
	p.timer.Stop()
}

func (p *progress) report(ctx context.Context, st membership.Status) {
	defer func() { p.lastPhase = st.Phase }()
	switch {
	case st.Phase == membership.JobRunning && st.Generation == p.lastRunning:
		return // the same generation, still running
	case st.Phase == membership.JobSucceeded:
		p.flush()
	default:
		// Another generation, or the end: the pending one did not run
		// for settle; what follows says why it ended.
		p.pending = ""
		p.timer.Stop()
	}
	switch st.Phase {
	case membership.JobRunning:
		p.lastRunning = st.Generation
		reason := ""
		if plan, err := p.client.Plan(ctx, p.job); err == nil && plan.Generation == st.Generation {
			reason = plan.Reason
		}
		took := "started"
		if st.Steps != nil {
			took = fmt.Sprintf("took %s", st.Steps.Total)
			if st.Generation == 1 {
				took = fmt.Sprintf("started in %s", st.Steps.Start)
			} else {
				took = "restart " + took
			}
		}
		p.pending = fmt.Sprintf("coordinator run: generation %d running: %s, world size %d (%s); %s\n",
			st.Generation, english.Count(st.Members, "node"), st.WorldSize, reason, took)
		p.timer.Reset(settle)
	case membership.JobWaiting:
		if p.lastPhase != membership.JobWaiting {
			fmt.Fprintf(p.out, "coordinator run: %s\n", st.Message)
		}
	case membership.JobSucceeded:
		fmt.Fprintf(p.out, "coordinator run: job %s succeeded: %s\n", p.job, st.Message)
	case membership.JobFailed:
		fmt.Fprintf(p.out, "coordinator run: job %s failed with exit code %d: %s\n", p.job, st.ExitCode, st.Message)
	}
}
