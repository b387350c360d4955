package coordinator

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/membership"
)

// beganText says how the ranks of a running generation began it, from
// their nodes' acks (membership.Node.Began), for the GenerationRunning
// event: "in place: ranks 0, 2; started spare: rank 1; cold: rank 3 (its
// started spare exited with code 1 before it reached elastic.run)". Empty
// when no node says (its trainers do not train in place).
func beganText(p membership.Plan, ix *nodeIndex) string {
	var order []string
	ranks := map[string][]string{}
	for _, m := range p.Members {
		n, ok := ix.nodes[m.Node]
		if !ok || n.Generation != p.Generation || n.State != membership.NodeRunning || len(n.Began) == 0 {
			continue
		}
		for local, how := range n.Began {
			if local >= max(m.NProc, 1) {
				break
			}
			rank := strconv.Itoa(m.GlobalRank + local)
			if m.Role != membership.RoleWorker && m.Role != "" {
				rank = string(m.Role) + " " + rank
			}
			if _, seen := ranks[how]; !seen {
				order = append(order, how)
			}
			ranks[how] = append(ranks[how], rank)
		}
	}
	parts := make([]string, 0, len(order))
	for _, how := range order {
		kind, why, _ := strings.Cut(how, ": ")
		part := fmt.Sprintf("%s: %s %s", kind, english.Plural(len(ranks[how]), "rank"), strings.Join(ranks[how], ", "))
		if why != "" {
			part += " (" + why + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}
