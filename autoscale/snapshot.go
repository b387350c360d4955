package autoscale

import "time"

// Snapshot is what the policy decides from: the cluster as the informers
// last saw it.
type Snapshot struct {
	Nodes []Node
	// Pending are pods not yet bound to a node, except elastic jobs'
	// workers, which are the jobs' own demand: other workloads' pods and
	// elastic jobs' other pods (parameter servers, say).
	Pending []Pod
	Jobs    []Job
}

// Node is a node that takes pods, and what is placed on it.
type Node struct {
	Name        string
	Allocatable Resources
	// Used is the requests of the pods bound to the node that have not
	// finished and are not being deleted (their room is as good as free),
	// and of pending pods the scheduler nominated to it.
	Used Resources
}

// Pod is a pending pod.
type Pod struct {
	Name     string
	Priority int32
	Request  Resources
	// Job is the elastic job the pod belongs to, if any: its pending
	// parameter servers must fit before its workers count.
	Job string
	// Eligible are the nodes the pod may go to (its node selector, the
	// taints it tolerates); nil is every node.
	Eligible map[string]bool
}

// Job is an elastic job that the policy may resize.
type Job struct {
	ID string
	// Min and Max bound the workers; Min is never given up.
	Min, Max int
	// Target is the number of workers the job was last given; 0 if none
	// has been decided yet.
	Target int
	// Worker is one worker's request.
	Worker Resources
	// Priority is the Kubernetes priority of the job's pods, comparable
	// with other pods'; Rank orders jobs of one Priority (an ElasticJob's
	// spec.priority).
	Priority int32
	Rank     int
	Created  time.Time
	// Changed is when Target last changed (zero if unknown): the cooldown
	// counts from it.
	Changed time.Time
	// Placed are the job's worker pods bound to a node and not terminating.
	Placed []Worker
	// Eligible are the nodes its workers may go to; nil is every node.
	Eligible map[string]bool
}

// Worker is one of a job's worker pods bound to a node. A job that shrinks
// loses its highest ordinals, as a StatefulSet does.
type Worker struct {
	Node    string
	Ordinal int
}

// current is the job's size as the policy counts it: its target, or what
// is placed when it has none yet.
func (j *Job) current() int {
	if j.Target > 0 {
		return j.Target
	}
	return len(j.Placed)
}

// fulfillment is EDL's measure: how far between min and max the job is at
// n workers, 0 to 1 (1 for a job whose min is its max).
func (j *Job) fulfillment(n int) float64 {
	if j.Max <= j.Min {
		return 1
	}
	return float64(n-j.Min) / float64(j.Max-j.Min)
}
