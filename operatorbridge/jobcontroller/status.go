package jobcontroller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/membership"
)

// writeStatus reports the job in its resource's status: the coordinator's
// status of it, its worker pods for the scale subresource, and what keeps
// Kubernetes from following it. It writes only a change, and says phase and
// generation changes as Events.
func (t *term) writeStatus(ctx context.Context, k *servedKind, u *unstructured.Unstructured, j *Job, problems []string) error {
	oldRaw, _ := u.Object["status"].(map[string]any)
	oldRaw = runtime.DeepCopyJSON(orEmpty(oldRaw))
	// The last report, from the status if the kind's is the report, or
	// else from this term's memory.
	old, said := t.reports[keyOf(u)]
	if k.Name == jobv1.Kind {
		old, said = jobv1.ElasticJobStatus{}, true
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(oldRaw, &old)
	}
	next := t.status(u, j, old, problems)
	raw, err := k.status(next, j, runtime.DeepCopyJSON(oldRaw))
	if err != nil {
		return err
	}
	if equalJSON(oldRaw, raw) {
		t.reports[keyOf(u)] = next
		return nil
	}
	obj := u.DeepCopy()
	obj.Object["status"] = raw
	if _, err := t.cfg.Dynamic.Resource(k.Resource).Namespace(u.GetNamespace()).
		UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update the status of %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	t.reports[keyOf(u)] = next
	if said {
		t.sayChanges(u, old, next)
	}
	return nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// equalJSON compares two JSON objects as the API server stores them.
func equalJSON(a, b map[string]any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// status is the job's status now; old gives the conditions their times.
func (t *term) status(u *unstructured.Unstructured, j *Job, old jobv1.ElasticJobStatus, problems []string) jobv1.ElasticJobStatus {
	name := u.GetName()
	next := jobv1.ElasticJobStatus{
		Phase:              jobv1.PhasePending,
		ObservedGeneration: u.GetGeneration(),
		Conditions:         old.Conditions,
	}
	rec := t.recordsOf(name)
	// The job's id is its name: while another resource of that name holds
	// it, the workers of that name are the other's, and neither their
	// count nor their selector (an HPA's) is this job's.
	if rec.Spec == nil || (j != nil && rec.Spec.Owner == j.Spec.Owner) {
		next.Selector = labelsString(name, membership.RoleWorker)
	}
	if s, err := t.sets.StatefulSets(u.GetNamespace()).Get(StatefulSetName(name, membership.RoleWorker)); err == nil && owns(s.OwnerReferences, u.GetUID()) {
		next.Replicas = s.Status.Replicas
		// The spares are the pods past the workers: the scale
		// subresource (an HPA's, kubectl scale's) counts workers alone.
		if j != nil && j.Spec.Spares > 0 {
			target := int32(j.Spec.Workers().Max)
			next.Spares = min(max(next.Replicas-target, 0), int32(j.Spec.Spares))
			next.Replicas -= next.Spares
		}
	}
	if j != nil && rec.Spec != nil && rec.Spec.Owner == j.Spec.Owner && rec.Status != nil {
		s := rec.Status
		next.Phase, next.Generation, next.NP = string(s.Phase), s.Generation, s.NP.String()
		next.Ready, next.WorldSize, next.Message = s.Ready, s.WorldSize, s.Message
		next.Restarts, next.FailureRestarts, next.HangRestarts = s.Interruptions, s.Restarts, s.HangRestarts
		// Running, every member is ready, the workers among them; Waiting,
		// Ready counts live workers alone.
		next.WorkersReady = s.Ready
		if s.Phase == membership.JobRunning && s.Workers > 0 {
			next.WorkersReady = s.Workers
		}
		if s.Malformed != "" {
			problems = append(problems, "malformed records in etcd, the last good values standing: "+s.Malformed)
		}
		if s.Steps != nil {
			next.LastRestartSeconds = fmt.Sprintf("%.2f", time.Duration(s.Steps.Total).Seconds())
		}
		next.Goodput = goodputOf(s.Goodput)
	} else if j != nil {
		next.NP = j.Spec.Workers().String()
	}
	if j != nil {
		next.ReplicaStatuses = t.replicaStatuses(u, j, next.WorkersReady)
	}
	if rec.Bridge != nil && rec.Bridge.Problem != "" && j != nil && rec.Spec != nil && rec.Spec.Owner == j.Spec.Owner {
		problems = append(problems, rec.Bridge.Problem)
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
	if j != nil {
		set(jobv1.ConditionCreated, true, "Created", fmt.Sprintf("%s %s is served by the coordinator", u.GetKind(), name))
	}
	running := next.Phase == jobv1.PhaseRunning
	set(jobv1.ConditionRunning, running, next.Phase, or(next.Message, "phase "+next.Phase))
	set(jobv1.ConditionRestarting, next.Phase == jobv1.PhaseRestarting, next.Phase, generationMessage(next))
	if next.Problem == "" {
		set(jobv1.ConditionKubernetesReady, true, "Ready", "Kubernetes follows the job")
	} else {
		set(jobv1.ConditionKubernetesReady, false, "Problem", next.Problem)
	}
	if suspended := next.Phase == jobv1.PhaseSuspended; suspended || (j != nil && j.Spec.Suspend) || meta.FindStatusCondition(next.Conditions, jobv1.ConditionSuspended) != nil {
		reason := "Resumed"
		switch {
		case suspended:
			reason = "Suspended"
		case j != nil && j.Spec.Suspend:
			reason = "Suspending"
		}
		set(jobv1.ConditionSuspended, suspended, reason, or(next.Message, "phase "+next.Phase))
	}
	if q := t.queued[keyOf(u)]; q != nil {
		setAdmittedCondition(&next.Conditions, q, gen)
	}
	finished := next.Phase == jobv1.PhaseSucceeded || next.Phase == jobv1.PhaseFailed
	set(jobv1.ConditionFinished, finished, next.Phase, or(next.Message, "phase "+next.Phase))
	if finished {
		set(next.Phase, true, next.Phase, or(next.Message, "phase "+next.Phase))
	}
	return next
}

// goodputOf is the job's goodput as of its account's last moment, as the
// status shows it: "97.3%"; empty without one. Read as of then, not now,
// the status changes when the account does, not at every reconcile.
func goodputOf(g *membership.Goodput) string {
	if g == nil {
		return ""
	}
	r := g.Total.Ratio()
	if r < 0 {
		return ""
	}
	return fmt.Sprintf("%.1f%%", 100*r)
}

// generationMessage says the generation a job is at and why: the
// coordinator's message, which names the cause of a restart.
func generationMessage(s jobv1.ElasticJobStatus) string {
	msg := s.Message
	switch {
	case msg == "" && s.Phase == jobv1.PhaseRunning:
		msg = fmt.Sprintf("%d ready, world size %d", s.Ready, s.WorldSize)
	case msg == "":
		msg = "phase " + s.Phase
	}
	if s.Generation == 0 || strings.Contains(msg, fmt.Sprintf("generation %d", s.Generation)) {
		return msg
	}
	return fmt.Sprintf("generation %d: %s", s.Generation, msg)
}

// replicaStatuses counts each role's pods from its StatefulSet: those
// there and, of workers, those running in the current generation
// (workersReady, the coordinator's count); of the other roles, those
// Kubernetes reports ready.
func (t *term) replicaStatuses(u *unstructured.Unstructured, j *Job, workersReady int) map[string]jobv1.ReplicaStatus {
	out := map[string]jobv1.ReplicaStatus{}
	for _, r := range j.Roles {
		var rs jobv1.ReplicaStatus
		if s, err := t.sets.StatefulSets(u.GetNamespace()).Get(StatefulSetName(j.ID, r.Name)); err == nil && owns(s.OwnerReferences, u.GetUID()) {
			rs = jobv1.ReplicaStatus{Replicas: s.Status.Replicas, Ready: s.Status.ReadyReplicas}
		}
		if r.Name == membership.RoleWorker {
			rs.Ready = int32(workersReady)
		}
		out[string(r.Name)] = rs
	}
	return out
}

// sayChanges records the Events of a status change: a new phase, a new
// generation.
func (t *term) sayChanges(u *unstructured.Unstructured, old, next jobv1.ElasticJobStatus) {
	if next.Phase != old.Phase {
		kind := corev1.EventTypeNormal
		if next.Phase == jobv1.PhaseFailed {
			kind = corev1.EventTypeWarning
		}
		t.Recorder.Eventf(u, kind, next.Phase, "%s → %s: %s", or(old.Phase, "new"), next.Phase, or(next.Message, "np "+next.NP))
		t.logger.Info("job phase", "job", u.GetName(), "from", old.Phase, "to", next.Phase)
	}
	if next.Generation != old.Generation && next.Phase == jobv1.PhaseRunning {
		t.Recorder.Eventf(u, corev1.EventTypeNormal, "Generation", "generation %d running: %d ready, world size %d, restart took %ss",
			next.Generation, next.Ready, next.WorldSize, or(next.LastRestartSeconds, "?"))
	}
}

// warnOnce records a Warning Event on the job unless the same was said.
func (t *term) warnOnce(u *unstructured.Unstructured, reason, message string) {
	said := t.warned[keyOf(u)]
	if said == nil {
		said = map[string]string{}
		t.warned[keyOf(u)] = said
	}
	if said[reason] == message {
		return
	}
	said[reason] = message
	t.logger.Warn("job needs attention", "job", u.GetName(), "reason", reason, "problem", message)
	t.Recorder.Event(u, corev1.EventTypeWarning, reason, message)
}

func labelsString(job string, role membership.Role) string {
	return jobv1.LabelJob + "=" + job + "," + jobv1.LabelRole + "=" + string(role)
}
