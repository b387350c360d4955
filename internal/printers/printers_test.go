package printers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/internal/printers"
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
