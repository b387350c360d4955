package printers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/internal/printers"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

func TestShortDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{45 * time.Second, "45s"},
		{12*time.Minute + 59*time.Second, "12m"},
		{47 * time.Hour, "47h"},
		{5*24*time.Hour + time.Hour, "5d"},
	} {
		assert.Equal(t, tc.want, printers.ShortDuration(tc.d), "%s", tc.d)
	}
}

// A watch prints the header and each row on its own; padded, they line
// up under one another whatever the job's name and the values.
func TestPaddedRowsLineUp(t *testing.T) {
	v := printers.NewStatus("a-long-job-name", membership.Status{Phase: membership.JobRestarting, Generation: 12, NP: membership.NP{Min: 2, Max: 16}})
	first := len(v.Job)
	header := printers.PaddedRow(printers.StatusHeader(), first)
	row := printers.PaddedRow(printers.StatusCells(v), first)
	for _, title := range printers.StatusHeader()[1:] {
		at := strings.Index(header, title)
		assert.Equal(t, "  ", row[at-2:at], "column %s starts where its title does", title)
		assert.NotEqual(t, " ", row[at:at+1], "column %s", title)
	}
}

func TestStepCells(t *testing.T) {
	assert.Equal(t, []string{"-", "-", "-", "-", "-"}, printers.StepCells(nil))
	st := &membership.Steps{Detect: membership.Duration(time.Second), Stop: membership.Duration(2 * time.Millisecond), Total: membership.Duration(3 * time.Second)}
	assert.Equal(t, []string{"1s", "2ms", "0s", "0s", "3s"}, printers.StepCells(st))
}

func TestNPIsADashWhenThereIsNone(t *testing.T) {
	var none *printers.NP
	assert.Equal(t, "-", none.String())
	assert.Equal(t, "2:4", (&printers.NP{Min: 2, Max: 4}).String())
	assert.Nil(t, printers.NewStatus("j", membership.Status{}).NP)
}

// Nodes are listed by role and rank, standby nodes last, ids compared with
// their numbers as numbers: not in the order they joined.
func TestNodesAreSortedByRoleAndRank(t *testing.T) {
	rank := func(r int) *int { return &r }
	nodes := []printers.Node{
		{Node: "j-1", Role: membership.RoleWorker, Rank: rank(1)},
		{Node: "j-10", Role: membership.RoleWorker},
		{Node: "ps-0", Role: membership.RolePS, Rank: rank(0)},
		{Node: "j-0", Role: membership.RoleWorker, Rank: rank(0)},
		{Node: "j-2", Role: membership.RoleWorker},
		{Node: "sched", Role: membership.RoleScheduler, Rank: rank(0)},
		{Node: "j-9", Role: membership.RoleWorker, Rank: rank(10)},
		{Node: "j-8", Role: membership.RoleWorker, Rank: rank(2)},
	}
	printers.SortNodes(nodes)
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.Node)
	}
	assert.Equal(t, []string{"j-0", "j-1", "j-8", "j-9", "j-2", "j-10", "ps-0", "sched"}, ids)
}

// The list of jobs counts the restarts hung ranks cost, as status does.
func TestJobsCountHangRestarts(t *testing.T) {
	var b strings.Builder
	printers.WriteJobsTable(&b, []jobclient.JobSummary{{ID: "j", Nodes: 2, Status: membership.Status{Phase: membership.JobRunning, Generation: 4, Restarts: 1, HangRestarts: 3}}}, time.Now())
	assert.Regexp(t, `(?m)^j\s+Running\s+4\s+\S+\s+\S+\s+2\s+4 \(3 hung\)\s`, b.String())
	assert.Equal(t, "2", printers.RestartsCell(2, 0))
}
