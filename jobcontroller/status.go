package jobcontroller

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge"
)

// writeStatus reports the job in its resource's status: the coordinator's
// status of it, its worker pods for the scale subresource, and what keeps
// Kubernetes from following it. It writes only a change, and says phase and
// generation changes as Events.
func (t *term) writeStatus(ctx context.Context, u *unstructured.Unstructured, j *Job, problems []string) error {
	var old jobv1.ElasticJobStatus
	if raw, ok := u.Object["status"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &old)
	}
	next := t.status(u, j, old, problems)
	if reflect.DeepEqual(old, next) {
		return nil
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&next)
	if err != nil {
		return err
	}
	obj := u.DeepCopy()
	obj.Object["status"] = raw
	if _, err := t.cfg.Dynamic.Resource(jobv1.GroupVersionResource).Namespace(u.GetNamespace()).
		UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update the status of %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	t.sayChanges(u, old, next)
	return nil
}

// status is the job's status now; old gives the conditions their times.
func (t *term) status(u *unstructured.Unstructured, j *Job, old jobv1.ElasticJobStatus, problems []string) jobv1.ElasticJobStatus {
	name := u.GetName()
	next := jobv1.ElasticJobStatus{
		Phase:              jobv1.PhasePending,
		Selector:           labelsString(name, membership.RoleWorker),
		ObservedGeneration: u.GetGeneration(),
		Conditions:         old.Conditions,
	}
	if s, err := t.sets.StatefulSets(u.GetNamespace()).Get(StatefulSetName(name, membership.RoleWorker)); err == nil {
		next.Replicas = s.Status.Replicas
	}
	rec := t.recordsOf(name)
	if j != nil && rec.spec != nil && rec.spec.Owner == j.Spec.Owner && rec.status != nil {
		s := rec.status
		next.Phase, next.Generation, next.NP = string(s.Phase), s.Generation, s.NP
		next.Ready, next.WorldSize, next.Restarts, next.Message = s.Ready, s.WorldSize, s.Restarts, s.Message
		if s.Steps != nil {
			next.LastRestartSeconds = fmt.Sprintf("%.2f", time.Duration(s.Steps.Total).Seconds())
		}
	} else if j != nil {
		next.NP = j.Spec.NP.String()
	}
	if rec.bridge != nil && rec.bridge.Problem != "" && j != nil && rec.spec != nil && rec.spec.Owner == j.Spec.Owner {
		problems = append(problems, rec.bridge.Problem)
	}
	next.Problem = strings.Join(problems, "; ")

	gen := u.GetGeneration()
	set := func(typ string, ok bool, reason, message string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: gen})
	}
	running := next.Phase == jobv1.PhaseRunning
	set(jobv1.ConditionRunning, running, next.Phase, or(next.Message, "phase "+next.Phase))
	if next.Problem == "" {
		set(jobv1.ConditionKubernetesReady, true, "Ready", "Kubernetes follows the job")
	} else {
		set(jobv1.ConditionKubernetesReady, false, "Problem", next.Problem)
	}
	finished := next.Phase == jobv1.PhaseSucceeded || next.Phase == jobv1.PhaseFailed
	set(jobv1.ConditionFinished, finished, next.Phase, or(next.Message, "phase "+next.Phase))
	return next
}

// sayChanges records the Events of a status change: a new phase, a new
// generation.
func (t *term) sayChanges(u *unstructured.Unstructured, old, next jobv1.ElasticJobStatus) {
	if next.Phase != old.Phase {
		kind := corev1.EventTypeNormal
		if next.Phase == jobv1.PhaseFailed {
			kind = corev1.EventTypeWarning
		}
		t.recorder.Eventf(u, kind, next.Phase, "%s → %s: %s", or(old.Phase, "new"), next.Phase, or(next.Message, "np "+next.NP))
		t.logger.Info("job phase", "job", u.GetName(), "from", old.Phase, "to", next.Phase)
	}
	if next.Generation != old.Generation && next.Phase == jobv1.PhaseRunning {
		t.recorder.Eventf(u, corev1.EventTypeNormal, "Generation", "generation %d running: %d ready, world size %d, restart took %ss",
			next.Generation, next.Ready, next.WorldSize, or(next.LastRestartSeconds, "?"))
	}
}

// warnOnce records a Warning Event on the job unless the same was said.
func (t *term) warnOnce(u *unstructured.Unstructured, reason, message string) {
	said := t.warned[u.GetName()]
	if said == nil {
		said = map[string]string{}
		t.warned[u.GetName()] = said
	}
	if said[reason] == message {
		return
	}
	said[reason] = message
	t.logger.Warn("job needs attention", "job", u.GetName(), "reason", reason, "problem", message)
	t.recorder.Event(u, corev1.EventTypeWarning, reason, message)
}

func labelsString(job string, role membership.Role) string {
	return operatorbridge.LabelJob + "=" + job + "," + operatorbridge.LabelRole + "=" + string(role)
}
