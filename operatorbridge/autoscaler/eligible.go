package autoscaler

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
)

// eligibility computes the nodes a pod may go to, by its node selector and
// the taints it tolerates, cached by those two: the pods of a workload
// share them. Node affinity and topology spread are not looked at; a pod
// that uses them is counted as fitting on every node its selector allows.
type eligibility struct {
	nodes []*corev1.Node
	cache map[string]map[string]bool
}

func newEligibility(nodes []*corev1.Node) *eligibility {
	return &eligibility{nodes: nodes, cache: map[string]map[string]bool{}}
}

// of returns the nodes pod p may go to, nil for every node.
func (e *eligibility) of(p *corev1.Pod) map[string]bool {
	if len(p.Spec.NodeSelector) == 0 && !e.anyTaint() {
		return nil
	}
	key := signature(p)
	if set, ok := e.cache[key]; ok {
		return set
	}
	selector := labels.SelectorFromSet(p.Spec.NodeSelector)
	set := map[string]bool{}
	for _, n := range e.nodes {
		if selector.Matches(labels.Set(n.Labels)) && tolerates(p.Spec.Tolerations, n.Spec.Taints) {
			set[n.Name] = true
		}
	}
	e.cache[key] = set
	return set
}

func (e *eligibility) anyTaint() bool {
	return slices.ContainsFunc(e.nodes, func(n *corev1.Node) bool { return len(n.Spec.Taints) > 0 })
}

// tolerates reports whether the tolerations allow scheduling on a node with
// these taints: every NoSchedule and NoExecute taint tolerated.
func tolerates(tolerations []corev1.Toleration, taints []corev1.Taint) bool {
	for _, taint := range taints {
		if taint.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !slices.ContainsFunc(tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &taint, false) }) {
			return false
		}
	}
	return true
}

// signature is a key for a pod's node selector and tolerations.
func signature(p *corev1.Pod) string {
	var b strings.Builder
	keys := make([]string, 0, len(p.Spec.NodeSelector))
	for k := range p.Spec.NodeSelector {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString(k + "=" + p.Spec.NodeSelector[k] + ";")
	}
	b.WriteString("|")
	for _, t := range p.Spec.Tolerations {
		b.WriteString(string(t.Operator) + ":" + t.Key + "=" + t.Value + ":" + string(t.Effect) + ";")
	}
	return b.String()
}
