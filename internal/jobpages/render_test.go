package jobpages

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/internal/printers"
	"github.com/elastictraining/coordinator/membership"
)

// The pages say what `status` and `jobs` say: a spare's rank is "spare",
// restarts count those hung ranks cost, the slowest rank and the spares
// are given.
func TestThePagesSayWhatStatusSays(t *testing.T) {
	zero := 0
	st := printers.Status{Head: printers.Head{Job: "j", Phase: membership.JobRunning, Generation: 4}, Restarts: 1, HangRestarts: 3, Spares: 1,
		Slowest: &printers.Slowest{Node: "j-0", Rank: 0, Step: 1234, StepTime: 0.021, HangTimeout: 5},
		Nodes: []printers.Node{
			{Node: "j-0", Role: membership.RoleWorker, Rank: &zero, State: membership.NodeRunning},
			{Node: "j-1", Role: membership.RoleWorker, State: membership.NodeRunning},
		}}
	var table bytes.Buffer
	printers.WriteStatusTable(&table, st)

	var page bytes.Buffer
	require.NoError(t, templates.ExecuteTemplate(&page, "job.html", map[string]any{"Job": st}))
	html := page.String()
	assert.Contains(t, html, `<tr data-node="j-1">
<td>j-1</td><td>worker</td><td class="num">spare</td>`)
	assert.Contains(t, table.String(), "j-1   worker  spare")
	assert.Contains(t, html, "1 after failures, 3 after hung ranks")
	for _, line := range []string{st.Slowest.Line(), st.SparesLine()} {
		assert.Contains(t, table.String(), line)
		assert.Contains(t, html, strings.ReplaceAll(line, "'", "&#39;"))
	}

	var list bytes.Buffer
	job := printers.Job{Head: st.Head, Restarts: 1, HangRestarts: 3}
	require.NoError(t, templates.ExecuteTemplate(&list, "jobs.html", map[string]any{"Jobs": []printers.Job{job}, "Now": time.Now()}))
	assert.Contains(t, list.String(), `<td class="num">4 (3 hung)</td>`)
}
