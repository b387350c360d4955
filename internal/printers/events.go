package printers

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// Event is one event of `events -o json`: durations in seconds.
type Event struct {
	Seq        int64     `json:"seq"`
	Time       time.Time `json:"time"`
	Generation int64     `json:"generation"`
	Type       string    `json:"type"`
	Message    string    `json:"message"`
	Members    int       `json:"members,omitempty"`
	WorldSize  int       `json:"worldSize,omitempty"`
	Steps      *Steps    `json:"steps,omitempty"`
}

// WriteEventsJSON writes the events as `events -o json` prints them: one
// JSON array of Event.
func WriteEventsJSON(w io.Writer, events []membership.Event) error {
	out := make([]Event, 0, len(events))
	for _, e := range events {
		out = append(out, Event{Seq: e.Seq, Time: e.Time, Generation: e.Generation, Type: e.Type, Message: e.Message, Members: e.Members,
			WorldSize: e.WorldSize, Steps: newSteps(e.Steps)})
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
