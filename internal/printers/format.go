package printers

import (
	"encoding/json"
	"io"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// NP is np for scripts: numbers, not "2:4".
type NP struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// String is np as the tables write it ("2:4", "3"), and "-" for none.
func (v *NP) String() string {
	if v == nil {
		return "-"
	}
	return membership.NP{Min: v.Min, Max: v.Max}.String()
}

// newNP is the job's target np, nil when it has none.
func newNP(np membership.NP) *NP {
	if np.IsZero() {
		return nil
	}
	return &NP{Min: np.Min, Max: np.Max}
}

// Steps are a restart's durations in seconds.
type Steps struct {
	Detect float64 `json:"detect"`
	Stop   float64 `json:"stop"`
	Wait   float64 `json:"wait"`
	Start  float64 `json:"start"`
	Total  float64 `json:"total"`
}

func seconds(d membership.Duration) float64 { return time.Duration(d).Seconds() }

// newSteps is a restart's durations in seconds, nil when there are none.
func newSteps(st *membership.Steps) *Steps {
	if st == nil {
		return nil
	}
	return &Steps{Detect: seconds(st.Detect), Stop: seconds(st.Stop), Wait: seconds(st.Wait), Start: seconds(st.Start), Total: seconds(st.Total)}
}

// StepCells are a restart's durations as the tables write them: detect,
// stop, wait, start and total, each "-" when there are none.
func StepCells(st *membership.Steps) []string {
	if st == nil {
		return []string{"-", "-", "-", "-", "-"}
	}
	return []string{st.Detect.String(), st.Stop.String(), st.Wait.String(), st.Start.String(), st.Total.String()}
}

// Timestamp is a time as the tables write it: local, to the millisecond.
func Timestamp(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05.000") }

// WriteJSON writes v as one line of JSON.
func WriteJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// OrDash is s, or "-" for an empty cell.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
