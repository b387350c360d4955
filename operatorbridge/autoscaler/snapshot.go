package autoscaler

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/autoscale"
	"github.com/elastictraining/coordinator/membership"
)

// gpu is the extended resource counted as GPUs.
const gpu corev1.ResourceName = "nvidia.com/gpu"

// candidate is an elastic job the autoscaler may resize, as etcd has it.
type candidate struct {
	id      string
	spec    membership.Spec
	created int64       // the spec's create revision: the order of arrival
	owner   jobv1.Owner // zero when no resource owns the job
}

// view is what one pass decides from, and what it needs to carry the
// decisions out.
type view struct {
	snapshot autoscale.Snapshot
	jobs     map[string]*jobView
	// utilization is CPU requests of Running pods over allocatable CPU.
	utilization float64
}

// jobView is a candidate as the cluster shows it.
type jobView struct {
	candidate
	namespace string
	// workerRef is a worker pod's controller (the StatefulSet), for
	// Events on a job no resource owns.
	workerRef *corev1.ObjectReference
}

// buildView turns the informers' nodes and pods and etcd's candidates into
// a snapshot; holdsRoom says whether a pod being deleted still takes its
// room. A job none of whose worker pods exists yet is left out: its
// workers' request is not known.
func buildView(nodes []*corev1.Node, pods []*corev1.Pod, candidates map[string]candidate, holdsRoom func(*corev1.Pod) bool) view {
	v := view{jobs: map[string]*jobView{}}
	used := map[string]autoscale.Resources{}
	var allocatable, running int64
	var usable []*corev1.Node
	for _, n := range nodes {
		if n.Spec.Unschedulable || !ready(n) {
			continue
		}
		usable = append(usable, n)
		alloc := resources(n.Status.Allocatable)
		allocatable += alloc.MilliCPU
		v.snapshot.Nodes = append(v.snapshot.Nodes, autoscale.Node{Name: n.Name, Allocatable: alloc})
		used[n.Name] = autoscale.Resources{}
	}
	eligible := newEligibility(usable)
	jobs := map[string]*autoscale.Job{}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		req := podRequest(p)
		c, isJob := candidates[p.Labels[jobv1.LabelJob]]
		if isJob && c.owner.Kind != "" && c.owner.Namespace != p.Namespace {
			isJob = false // a job of the same name elsewhere
		}
		worker := isJob && p.Labels[jobv1.LabelRole] == string(membership.RoleWorker)
		if worker {
			j := jobs[c.id]
			if j == nil {
				j = &autoscale.Job{ID: c.id, Min: c.spec.NP.Min, Max: c.spec.NP.Max, Target: c.spec.Target,
					Worker: req, Priority: priority(p), Rank: c.spec.Priority,
					Created: time.Unix(0, c.created), Eligible: eligible.of(p)}
				jobs[c.id] = j
				jv := &jobView{candidate: c, namespace: p.Namespace}
				if ref := controllerRef(p); ref != nil {
					jv.workerRef = ref
				}
				v.jobs[c.id] = jv
			}
			// A spare (the pods past the target, as the StatefulSet
			// orders them) is neither a running worker nor a pending
			// one: placed, it takes its room; pending, it is no demand.
			spare := c.spec.Spares > 0 && ordinal(p.Name) >= c.spec.Workers().Max
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && !spare {
				j.Placed = append(j.Placed, autoscale.Worker{Node: p.Spec.NodeName, Ordinal: ordinal(p.Name)})
			}
		}
		if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
			running += req.MilliCPU
		}
		switch {
		case p.Spec.NodeName != "" && p.DeletionTimestamp != nil && !holdsRoom(p):
			// Being deleted and not replaced: its room is as good as
			// free (controllers.roomKeeper).
		case p.Spec.NodeName != "":
			if u, ok := used[p.Spec.NodeName]; ok {
				used[p.Spec.NodeName] = u.Add(req)
			}
		case worker:
			// A job's pending workers are its own demand, not a pod to
			// make room for.
		case p.Status.NominatedNodeName != "":
			if u, ok := used[p.Status.NominatedNodeName]; ok {
				used[p.Status.NominatedNodeName] = u.Add(req)
			}
		default:
			pod := autoscale.Pod{Name: p.Namespace + "/" + p.Name, Priority: priority(p), Request: req, Eligible: eligible.of(p)}
			if isJob {
				pod.Job = c.id
			}
			v.snapshot.Pending = append(v.snapshot.Pending, pod)
		}
	}
	for i := range v.snapshot.Nodes {
		v.snapshot.Nodes[i].Used = used[v.snapshot.Nodes[i].Name]
	}
	for _, j := range jobs {
		v.snapshot.Jobs = append(v.snapshot.Jobs, *j)
	}
	if allocatable > 0 {
		v.utilization = float64(running) / float64(allocatable)
	}
	return v
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podRequest is what the scheduler reserves for a pod: the containers'
// requests summed, or an init container's if larger, plus the overhead.
func podRequest(p *corev1.Pod) autoscale.Resources {
	var sum autoscale.Resources
	for _, c := range p.Spec.Containers {
		sum = sum.Add(resources(c.Resources.Requests))
	}
	for _, c := range p.Spec.InitContainers {
		r := resources(c.Resources.Requests)
		sum = autoscale.Resources{MilliCPU: max(sum.MilliCPU, r.MilliCPU), Memory: max(sum.Memory, r.Memory), GPU: max(sum.GPU, r.GPU)}
	}
	return sum.Add(resources(p.Spec.Overhead))
}

func resources(l corev1.ResourceList) autoscale.Resources {
	r := autoscale.Resources{}
	if q, ok := l[corev1.ResourceCPU]; ok {
		r.MilliCPU = q.MilliValue()
	}
	if q, ok := l[corev1.ResourceMemory]; ok {
		r.Memory = q.Value()
	}
	if q, ok := l[gpu]; ok {
		r.GPU = q.Value()
	}
	return r
}

func priority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// ordinal is a StatefulSet pod's ordinal, the number ending its name; a
// pod of another workload sorts last, the first to go.
func ordinal(name string) int {
	i := strings.LastIndexByte(name, '-')
	if n, err := strconv.Atoi(name[i+1:]); err == nil && n >= 0 {
		return n
	}
	return 1 << 30
}

func controllerRef(p *corev1.Pod) *corev1.ObjectReference {
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			return &corev1.ObjectReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID, Namespace: p.Namespace}
		}
	}
	return nil
}
