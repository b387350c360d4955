package localrun

import (
	"context"
	"fmt"
	"io"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// progress prints one line per generation that reaches Running, and one when
// the job waits or ends.
type progress struct {
	out         io.Writer
	client      *jobclient.Client
	job         string
	lastPhase   membership.JobPhase
	lastRunning int64
}

func newProgress(out io.Writer, client *jobclient.Client, job string) *progress {
	return &progress{out: out, client: client, job: job}
}

func (p *progress) report(ctx context.Context, st membership.Status) {
	defer func() { p.lastPhase = st.Phase }()
	switch st.Phase {
	case membership.JobRunning:
		if st.Generation == p.lastRunning {
			return
		}
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
		fmt.Fprintf(p.out, "coordinator run: generation %d running: %s, world size %d (%s); %s\n",
			st.Generation, english.Count(st.Members, "node"), st.WorldSize, reason, took)
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
