package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/autoscale"
)

// Annotations of a deletion cost.
const (
	// annotationDeletionCost is what a ReplicaSet's scale-down reads: the
	// pods of the lowest cost go first.
	annotationDeletionCost = "controller.kubernetes.io/pod-deletion-cost"
	// annotationCostSet is the cost the autoscaler set. A cost that is not
	// the one it set is someone else's, and left alone.
	annotationCostSet = "elastic.autoscaler/deletion-cost"
)

// replicaPods are the pods whose deletion costs the autoscaler steers:
// bound, not going, owned by a ReplicaSet, and not an elastic job's.
func replicaPods(pods []*corev1.Pod) []autoscale.ReplicaPod {
	var out []autoscale.ReplicaPod
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Labels[jobv1.LabelJob] != "" ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		owner := metav1.GetControllerOf(p)
		if owner == nil || owner.Kind != "ReplicaSet" || ownedByOthers(p) {
			continue
		}
		out = append(out, autoscale.ReplicaPod{Name: p.Namespace + "/" + p.Name, Owner: p.Namespace + "/" + owner.Name,
			Node: p.Spec.NodeName, Request: podRequest(p)})
	}
	return out
}

// ownedByOthers reports a deletion cost someone else set.
func ownedByOthers(p *corev1.Pod) bool {
	cost, ok := p.Annotations[annotationDeletionCost]
	return ok && cost != p.Annotations[annotationCostSet]
}

// costSteerer writes the deletion costs the passes want onto the pods, in
// the background: hundreds of patches must not hold up a pass that makes
// room for pods of a higher priority. Only the latest wish counts.
type costSteerer struct {
	kube    kubernetes.Interface
	pods    cache.Store
	logger  hclog.Logger
	patches prometheus.Counter
	// limit keeps the patches to a share of the client's rate, which the
	// bridge and the job controller use too: a round of hundreds must not
	// delay a job's scale.
	limit flowcontrol.RateLimiter

	mu   sync.Mutex
	want map[string]int32 // namespace/name → cost
	gen  int              // bumped by every wish
	kick chan struct{}
}

func newCostSteerer(kube kubernetes.Interface, pods cache.Store, logger hclog.Logger, patches prometheus.Counter) *costSteerer {
	return &costSteerer{kube: kube, pods: pods, logger: logger, patches: patches,
		limit: flowcontrol.NewTokenBucketRateLimiter(costPatchesPerSecond, costPatchesPerSecond), kick: make(chan struct{}, 1)}
}

// costPatchesPerSecond is the steerer's share of the client's 50 a second.
const costPatchesPerSecond = 20

// A round starts once the wishes have stopped changing for costQuiet, or
// costMaxQuiet after the first: while a workload scales up, every pod it
// places changes the costs, and patching each step would load the API
// server the scale-up waits on for nothing; costs matter at a scale-down.
const (
	costQuiet    = time.Second
	costMaxQuiet = 10 * time.Second
)

// wish replaces the costs wanted; the same again changes nothing, so
// that passes that change no cost do not restart a round.
func (s *costSteerer) wish(want map[string]int32) {
	s.mu.Lock()
	if maps.Equal(want, s.want) {
		s.mu.Unlock()
		return
	}
	s.want, s.gen = want, s.gen+1
	s.mu.Unlock()
	s.poke()
}

func (s *costSteerer) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// errChanged is a pod changed since it was read: read it again.
var errChanged = errors.New("pod changed")

// run patches the pods whose cost is not the one wanted, until ctx ends;
// a new wish restarts the round.
func (s *costSteerer) run(ctx context.Context) {
	written := map[string]int32{} // what this steerer last set, ahead of the informer
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		if !s.quiet(ctx) {
			return
		}
		s.mu.Lock()
		want, gen := s.want, s.gen
		s.mu.Unlock()
		for key := range written {
			if _, ok := want[key]; !ok {
				delete(written, key)
			}
		}
		patched, retry := 0, false
		for key, cost := range want {
			if ctx.Err() != nil || s.stale(gen) {
				break
			}
			if c, ok := written[key]; ok && c == cost {
				continue
			}
			did, err := s.patch(ctx, key, cost)
			if errors.Is(err, errChanged) {
				retry = true
				continue
			}
			if err == nil {
				if did {
					written[key] = cost
					patched++
				}
				continue
			}
			if !warned {
				s.logger.Warn("cannot set pods' deletion costs (deploy/autoscaler-deletion-cost grants it)", "pod", key, "error", err)
				warned = true
			}
			if apierrors.IsForbidden(err) {
				break
			}
		}
		if patched > 0 {
			s.logger.Debug("deletion costs set", "pods", patched, "wanted", len(want))
		}
		if retry {
			// Pods that changed under a patch are read again.
			time.AfterFunc(costQuiet, s.poke)
		}
	}
}

// quiet waits for the wishes to stop changing (costQuiet), costMaxQuiet
// at most; false if ctx ended.
func (s *costSteerer) quiet(ctx context.Context) bool {
	deadline := time.After(costMaxQuiet)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline:
			return true
		case <-s.kick:
		case <-time.After(costQuiet):
			return true
		}
	}
}

func (s *costSteerer) stale(gen int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen != gen
}

// patch sets one pod's cost unless it has it, or has someone else's, and
// says whether it did.
func (s *costSteerer) patch(ctx context.Context, key string, cost int32) (bool, error) {
	obj, ok, err := s.pods.GetByKey(key)
	if err != nil || !ok {
		return false, err
	}
	p, ok := obj.(*corev1.Pod)
	value := strconv.Itoa(int(cost))
	if !ok || p.Annotations[annotationDeletionCost] == value || ownedByOthers(p) {
		return false, nil
	}
	if err := s.limit.Wait(ctx); err != nil {
		return false, nil // ctx ended
	}
	// The pod as read is a precondition: a cost someone set meanwhile
	// makes the patch fail (a conflict) rather than be overwritten.
	body := fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q,"annotations":{%q:%q,%q:%q}}}`,
		p.ResourceVersion, annotationDeletionCost, value, annotationCostSet, value)
	_, err = s.kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, body, metav1.PatchOptions{})
	switch {
	case err == nil:
		s.patches.Inc()
		return true, nil
	case apierrors.IsConflict(err):
		return false, errChanged
	case apierrors.IsNotFound(err) || ctx.Err() != nil:
		return false, nil
	}
	return false, err
}
