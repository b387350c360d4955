package printers

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/elastictraining/coordinator/membership"
)

// Event is one event of `events -o json`: the record, with its durations
// in seconds (Steps hides the record's own).
type Event struct {
	membership.Event
	Steps *Steps `json:"steps,omitempty"`
}

// WriteEventsJSON writes the events as `events -o json` prints them: one
// JSON array of Event.
func WriteEventsJSON(w io.Writer, events []membership.Event) error {
	out := make([]Event, 0, len(events))
	for _, e := range events {
		out = append(out, Event{Event: e, Steps: newSteps(e.Steps)})
	}
	return WriteJSON(w, out)
}

// WriteEventsTable writes the events of the job called name as `events`
// prints them, one row each, in their order.
func WriteEventsTable(w io.Writer, name string, events []membership.Event) {
	if len(events) == 0 {
		fmt.Fprintf(w, "No events for job %s (serve keeps them for --event-retention).\n", name)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tGENERATION\tEVENT\tDETECT\tSTOP\tWAIT\tSTART\tTOTAL\tMESSAGE")
	for _, e := range events {
		steps := StepCells(e.Steps)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", Timestamp(e.Time), strconv.FormatInt(e.Generation, 10),
			e.Type, steps[0], steps[1], steps[2], steps[3], steps[4], e.Message)
	}
	tw.Flush()
}
