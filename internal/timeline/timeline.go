package timeline

import (
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// Generation is one generation of a job as its events tell it.
type Generation struct {
	Number int64
	// Starting is when the generation was committed; Running when every
	// member ran (zero if it never did).
	Starting, Running time.Time
	Members, World    int
	// Reason is why the generation exists (the GenerationStarting
	// message).
	Reason string
	// Steps are the durations of the restart that led to it.
	Steps *membership.Steps
}

// Generations reads the generations out of events, oldest first.
func Generations(events []membership.Event) []Generation {
	var out []Generation
	index := map[int64]int{}
	get := func(e membership.Event) *Generation {
		i, ok := index[e.Generation]
		if !ok {
			i = len(out)
			index[e.Generation] = i
			out = append(out, Generation{Number: e.Generation})
		}
		return &out[i]
	}
	for _, e := range events {
		switch e.Type {
		case "GenerationStarting":
			g := get(e)
			g.Starting, g.Reason = e.Time, e.Message
			g.Members, g.World = max(g.Members, e.Members), max(g.World, e.WorldSize)
		case "GenerationRunning":
			g := get(e)
			g.Running, g.Steps = e.Time, e.Steps
			g.Members, g.World = max(g.Members, e.Members), max(g.World, e.WorldSize)
			if g.Starting.IsZero() {
				g.Starting = e.Time
			}
		}
	}
	return out
}
