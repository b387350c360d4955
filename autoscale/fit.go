package autoscale

import "sort"

// cluster is the free room of every node, changed as the policy places and
// removes pods in its simulation.
type cluster struct {
	names []string // sorted, so that the simulation is deterministic
	free  map[string]Resources
}

func newCluster(nodes []Node) *cluster {
	c := &cluster{free: make(map[string]Resources, len(nodes))}
	for _, n := range nodes {
		if _, dup := c.free[n.Name]; dup {
			continue
		}
		c.names = append(c.names, n.Name)
		c.free[n.Name] = n.Allocatable.Sub(n.Used)
	}
	sort.Strings(c.names)
	return c
}

// place puts req on the eligible node (any, if eligible is nil) it fits
// best: the least CPU left after it, so that large holes stay whole for
// large pods. It returns the node.
func (c *cluster) place(req Resources, eligible map[string]bool) (string, bool) {
	best, bestLeft := "", int64(-1)
	for _, name := range c.names {
		free := c.free[name]
		if !free.Fits(req) || (eligible != nil && !eligible[name]) {
			continue
		}
		if left := free.MilliCPU - req.MilliCPU; best == "" || left < bestLeft {
			best, bestLeft = name, left
		}
	}
	if best == "" {
		return "", false
	}
	c.free[best] = c.free[best].Sub(req)
	return best, true
}

// release gives req back to a node.
func (c *cluster) release(node string, req Resources) {
	if free, ok := c.free[node]; ok {
		c.free[node] = free.Add(req)
	}
}

// take removes req from a node, undoing a release.
func (c *cluster) take(node string, req Resources) {
	if free, ok := c.free[node]; ok {
		c.free[node] = free.Sub(req)
	}
}
