package autoscaler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/autoscale"
	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// apply sets a job's number of workers the way a person would: through
// the scale subresource of the resource that owns it (its controller then
// writes the spec), or the spec's target in etcd. The etcd write is fenced
// on the lead and yields to whoever changed np meanwhile.
func (t *term) apply(ctx context.Context, j *jobView, workers int) error {
	if j.owner.Kind == "" {
		var fence []clientv3.Cmp
		if f, ok := presence.LeaderFence(ctx); ok {
			fence = append(fence, f)
		}
		w, err := membership.SetTarget(ctx, t.cfg.Etcd, t.cfg.Keys, j.id, j.spec.NP, workers, fence...)
		if err == nil && w.Repaired != nil {
			t.logger.Warn("the job's stored spec was malformed; replaced with the last good one and the new target",
				"job", j.id, "target", workers, "malformed", w.Repaired)
			if ref := t.eventRef(j); ref != nil {
				t.Recorder.Eventf(ref, corev1.EventTypeWarning, "MalformedSpecReplaced",
					"the stored spec was malformed (%s); replaced with the last good spec, target %d", english.OneLine(w.Repaired.Error()), workers)
			}
		}
		return err
	}
	kind, _ := jobv1.JobKindNamed(j.owner.Kind)
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, workers)
	_, err := t.cfg.Dynamic.Resource(kind.Resource).Namespace(j.owner.Namespace).
		Patch(ctx, j.owner.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "elastic-autoscaler"}, "scale")
	if err != nil {
		return fmt.Errorf("scale %s %s/%s: %w", j.owner.Kind, j.owner.Namespace, j.owner.Name, err)
	}
	return nil
}

// eventRef is the object a job's Events go to: its resource, or its
// worker workload.
func (t *term) eventRef(j *jobView) *corev1.ObjectReference {
	if j == nil {
		return nil
	}
	if j.owner.Kind != "" {
		kind, _ := jobv1.JobKindNamed(j.owner.Kind)
		return &corev1.ObjectReference{APIVersion: kind.APIVersion(), Kind: j.owner.Kind,
			Namespace: j.owner.Namespace, Name: j.owner.Name, UID: types.UID(j.owner.UID)}
	}
	return j.workerRef
}

// report writes each job's autoscaler record when what it says changed,
// and the per-job metrics.
func (t *term) report(ctx context.Context, v view, plan autoscale.Plan, decided map[string]autoscale.Decision, now time.Time) {
	for _, j := range v.snapshot.Jobs {
		target := j.Target
		if d, ok := decided[j.ID]; ok {
			target = d.To
		}
		t.metrics.target.WithLabelValues(j.ID).Set(float64(target))
		t.metrics.desired.WithLabelValues(j.ID).Set(float64(plan.Desired[j.ID]))
		next := membership.AutoscalerStatus{Target: target, Desired: plan.Desired[j.ID], HeldBack: plan.HeldBack[j.ID]}
		last, known := t.reported[j.ID]
		next.Reason, next.ChangedAt = last.Reason, last.ChangedAt
		if d, ok := decided[j.ID]; ok {
			next.Reason, next.ChangedAt = d.Reason, now.UTC()
		}
		if known && next.Target == last.Target && next.Desired == last.Desired && next.HeldBack == last.HeldBack && next.Reason == last.Reason {
			continue
		}
		next.UpdatedAt = now.UTC()
		val, err := membership.Encode(next)
		if err != nil {
			continue
		}
		key := t.cfg.Keys.Autoscaler(j.ID)
		// Only while the job's spec is there: a deleted job's keys must
		// stay deleted.
		conds := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(t.cfg.Keys.Spec(j.ID)), ">", 0)}
		if f, ok := presence.LeaderFence(ctx); ok {
			conds = append(conds, f)
		}
		writeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := t.cfg.Etcd.Txn(writeCtx).If(conds...).Then(clientv3.OpPut(key, val)).Commit()
		cancel()
		if err == nil && resp.Succeeded {
			t.reported[j.ID] = next
		}
	}
	// Jobs no longer resized lose their series.
	current := map[string]bool{}
	for _, j := range v.snapshot.Jobs {
		current[j.ID] = true
	}
	for _, id := range slices.Collect(maps.Keys(t.reported)) {
		if !current[id] {
			delete(t.reported, id)
			t.metrics.target.DeleteLabelValues(id)
			t.metrics.desired.DeleteLabelValues(id)
		}
	}
}
