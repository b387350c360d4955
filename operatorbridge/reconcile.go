package operatorbridge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge/controller"
	"github.com/elastictraining/coordinator/trainerenv"
)

// reportedState is what the bridge last wrote and said about a job, so that
// it writes and logs only changes.
type reportedState struct {
	bridge  membership.BridgeStatus
	written bool
}

// errReported marks a failed reconcile whose problem is already in the
// bridge's report; the job is queued again with backoff.
var errReported = errors.New("bridge: reported")

var errCachesNotReady = fmt.Errorf("%w: kubernetes caches not filled", errReported)

// writtenConfig is a ConfigMap the bridge wrote: the generation it
// describes and the workload that owns it.
type writtenConfig struct {
	generation int64
	owner      types.UID
}

// reconcile makes Kubernetes follow one job. A write that fails is
// reported and makes it return an error, so that the job is tried again
// with backoff: nothing else may come along to prompt it.
func (t *term) reconcile(ctx context.Context, job string) error {
	rec, ok := t.records.Get(job)
	if !ok {
		t.metrics.forget(job) // deleted
		delete(t.reported, job)
		return nil
	}
	if rec.Spec == nil && rec.Plan == nil {
		return nil
	}
	if problem := t.cache.problem(); problem != "" {
		t.report(ctx, job, nil, 0, problem)
		return errCachesNotReady
	}
	byRole := map[membership.Role][]workload{}
	for _, role := range []membership.Role{membership.RoleWorker, membership.RolePS, membership.RoleScheduler, membership.RoleHeter} {
		byRole[role] = t.cache.workloadsOf(job, role)
	}
	var problems []string
	var failed []error
	var primary *workload
	if ws := byRole[membership.RoleWorker]; len(ws) == 0 {
		if rec.Spec != nil && rec.Spec.Owner != "" {
			// A job resource's: its controller makes the workloads and
			// says what keeps it from doing so.
			return nil
		}
		kinds := make([]string, len(t.cfg.Workloads))
		for i, gvr := range t.cfg.Workloads {
			kinds[i] = resourceName(gvr)
		}
		problems = append(problems, fmt.Sprintf("no workload labelled %s=%s,%s=worker in namespace %s among %s",
			jobv1.LabelJob, job, jobv1.LabelRole, controller.NamespaceName(t.cfg.Namespace), strings.Join(kinds, ", ")))
	} else {
		first := ws[0]
		primary = &first
		// The job is where its first worker workload is; a role's
		// workloads elsewhere are another job's of the same id.
		for role, ws := range byRole {
			byRole[role] = slices.DeleteFunc(ws, func(w workload) bool { return w.obj.GetNamespace() != primary.obj.GetNamespace() })
		}
		ws = byRole[membership.RoleWorker]
		if len(ws) > 1 {
			problems = append(problems, fmt.Sprintf("%d worker workloads carry job %s's labels; following %s", len(ws), job, ws[0]))
		}
	}

	replicas := 0
	for role, want := range desiredReplicas(rec) {
		ws := byRole[role]
		if len(ws) == 0 {
			if want > 0 && role != membership.RoleWorker {
				problems = append(problems, fmt.Sprintf("no workload labelled %s=%s,%s=%s for %d %s nodes", jobv1.LabelJob, job, jobv1.LabelRole, role, want, role))
			}
			continue
		}
		changed, err := t.scale(ctx, ws[0], want, rec)
		if err != nil {
			t.metrics.scales.WithLabelValues(job, "error").Inc()
			problems, failed = append(problems, err.Error()), append(failed, err)
			continue
		}
		if changed {
			t.metrics.scales.WithLabelValues(job, "ok").Inc()
		}
		if role == membership.RoleWorker {
			replicas = want
		}
	}
	// The ConfigMap is for the workload's pods and goes with the workload:
	// without one there is nothing to write it for, and nothing to own it.
	if rec.Plan != nil && rec.Plan.Phase == membership.PhaseRun && !rec.Plan.Unresolved() && primary != nil {
		if err := t.writeConfigMap(ctx, job, *rec.Plan, *primary); err != nil {
			problems, failed = append(problems, err.Error()), append(failed, err)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err() // stepping down: nothing to report
	}
	t.report(ctx, job, primary, replicas, strings.Join(problems, "; "))
	if len(failed) > 0 {
		return fmt.Errorf("%w: %w", errReported, errors.Join(failed...))
	}
	return nil
}

// desiredReplicas is the replica count of each role's workload: np's
// maximum of workers and the spares while the job runs, and none once it
// has ended and its cleanPodPolicy removes the pods, or once it is
// suspended and its generation stopped. A role left out is left alone.
func desiredReplicas(rec membership.JobRecords) map[membership.Role]int {
	if rec.Spec == nil {
		return nil
	}
	spec := *rec.Spec
	none := map[membership.Role]int{membership.RoleWorker: 0, membership.RolePS: 0, membership.RoleScheduler: 0, membership.RoleHeter: 0}
	if spec.Suspend {
		// The pods go once their trainers have stopped together: a pod
		// deleted under a running generation would restart it smaller.
		// Each sidecar writes its newest checkpoint to the job's path as
		// it leaves.
		if rec.Status != nil && rec.Status.Phase == membership.JobSuspended {
			return none
		}
		return nil
	}
	if rec.Status != nil && rec.Status.Phase.Done() {
		remove := false
		switch spec.CleanPodPolicy {
		case membership.CleanPodAlways:
			remove = true
		case membership.CleanPodOnCompletion:
			remove = rec.Status.Phase == membership.JobSucceeded
		case membership.CleanPodOnFailure:
			remove = rec.Status.Phase == membership.JobFailed
		}
		if !remove {
			return nil
		}
		return none
	}
	return map[membership.Role]int{
		membership.RoleWorker:    spec.Workers().Max + spec.Spares,
		membership.RolePS:        spec.PS,
		membership.RoleScheduler: spec.Schedulers,
		membership.RoleHeter:     spec.Heter,
	}
}

// scale sets a workload's replicas through its scale subresource. For the
// apps resources, whose spec.replicas is the scale, the cached object says
// whether anything needs doing without a call to the API server.
func (t *term) scale(ctx context.Context, w workload, want int, rec membership.JobRecords) (changed bool, err error) {
	if w.gvr.Group == "apps" {
		if cached, found, _ := unstructured.NestedInt64(w.obj.Object, "spec", "replicas"); found && cached == int64(want) {
			return false, nil
		}
	}
	res := t.cfg.Dynamic.Resource(w.gvr).Namespace(w.obj.GetNamespace())
	var have int64
	// A conflict is the workload's controller writing its status between
	// the read and the write: read again at once.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sc, err := res.Get(ctx, w.obj.GetName(), metav1.GetOptions{}, "scale")
		if err != nil {
			return explain(err, "get the scale of", w)
		}
		have, _, _ = unstructured.NestedInt64(sc.Object, "spec", "replicas")
		if have == int64(want) {
			return nil
		}
		if err := unstructured.SetNestedField(sc.Object, int64(want), "spec", "replicas"); err != nil {
			return fmt.Errorf("scale of %s: %w", w, err)
		}
		if _, err := res.Update(ctx, sc, metav1.UpdateOptions{}, "scale"); err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return explain(err, "update the scale of", w)
		}
		return nil
	})
	if err != nil {
		if apierrors.IsConflict(err) {
			err = explain(err, "update the scale of", w)
		}
		t.Recorder.Event(w.obj, corev1.EventTypeWarning, "ScaleFailed", err.Error())
		return false, err
	}
	if have == int64(want) {
		return false, nil
	}
	why := "np " + rec.Spec.Workers().String()
	switch {
	case want == 0 && rec.Spec.Suspend:
		why = "job suspended"
	case want == 0 && rec.Status != nil && rec.Status.Phase.Done():
		why = fmt.Sprintf("job %s, cleanPodPolicy %s", strings.ToLower(string(rec.Status.Phase)), rec.Spec.CleanPodPolicy)
	}
	t.logger.Info("scaled", "workload", w.String(), "from", have, "to", want, "why", why)
	t.Recorder.Eventf(w.obj, corev1.EventTypeNormal, "Scaled", "replicas %d → %d (%s)", have, want, why)
	return true, nil
}

// explain turns an API error into a sentence that says what to fix.
func explain(err error, doing string, w fmt.Stringer) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("cannot %s %s: it has no scale subresource, or is gone: %v", doing, w, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("RBAC denies to %s %s: %v", doing, w, err)
	}
	return fmt.Errorf("cannot %s %s: %v", doing, w, err)
}

// ConfigMapName is the name of a job's endpoint ConfigMap.
func ConfigMapName(job string) string { return job + "-elastic" }

// configWrite is what writing a generation's ConfigMap came to.
type configWrite int

const (
	configWritten   configWrite = iota // it describes the generation now
	configUnchanged                    // it did already; at most its owner changed
	configNewer                        // it describes a newer generation: left alone
)

// writeConfigMap writes the generation's endpoints to <job>-elastic, owned
// by the worker workload so that it goes with it, and records an Event on
// the workload the first time it describes a generation. It never replaces
// the ConfigMap of a newer generation: the bridge of a deposed leader,
// whose view of etcd lags, may be at work beside the new leader's. A write
// is remembered for the term only once it succeeded.
func (t *term) writeConfigMap(ctx context.Context, job string, p membership.Plan, owner workload) error {
	written := writtenConfig{generation: p.Generation, owner: owner.obj.GetUID()}
	if t.configs[job] == written {
		return nil // done this term; the next generation writes it again
	}
	want := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: ConfigMapName(job), Namespace: owner.obj.GetNamespace(),
			Labels:          map[string]string{jobv1.LabelJob: job},
			Annotations:     map[string]string{jobv1.AnnotationGeneration: strconv.FormatInt(p.Generation, 10)},
			OwnerReferences: []metav1.OwnerReference{ownerRef(owner.obj)},
		},
		Data: trainerenv.Of(job, p).Shared(),
	}
	var outcome configWrite
	var stored int64
	// A conflict means another writer came first: read again and decide anew.
	err := retry.OnError(retry.DefaultRetry, raced, func() (err error) {
		outcome, stored, err = t.putConfigMap(ctx, want, p.Generation)
		return err
	})
	if err != nil {
		return err
	}
	t.configs[job] = written
	switch outcome {
	case configNewer:
		t.logger.Info("configmap left as is: it describes a newer generation",
			"job", job, "generation", p.Generation, "stored", stored, "configmap", want.Name)
	case configWritten:
		t.logger.Info("endpoints written", "job", job, "generation", p.Generation, "configmap", want.Name)
		e := p.Endpoints()
		t.Recorder.Eventf(owner.obj, corev1.EventTypeNormal, "Generation", "generation %d: %s, %d ps, world size %d (%s)",
			p.Generation, english.Count(e.Nodes[membership.RoleWorker], "worker"), e.Nodes[membership.RolePS], p.WorldSize, p.Reason)
	}
	return nil
}

// putConfigMap makes the ConfigMap want, of generation gen, unless the one
// stored is of a newer generation, whose number it returns. An update
// carries the resourceVersion read, so that it cannot replace a write made
// since by someone else: that is a conflict, and the caller reads again.
func (t *term) putConfigMap(ctx context.Context, want *corev1.ConfigMap, gen int64) (configWrite, int64, error) {
	cms := t.cfg.Kube.CoreV1().ConfigMaps(want.Namespace)
	have, err := cms.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := cms.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return 0, 0, fmt.Errorf("create ConfigMap %s: %w", want.Name, err)
		}
		return configWritten, 0, nil
	case err != nil:
		return 0, 0, fmt.Errorf("get ConfigMap %s: %w", want.Name, err)
	}
	stored := storedGeneration(have)
	switch {
	case stored > gen:
		return configNewer, stored, nil
	case stored == gen && maps.Equal(have.Data, want.Data) && sameOwners(have.OwnerReferences, want.OwnerReferences):
		return configUnchanged, stored, nil
	}
	next := have.DeepCopy() // with have's resourceVersion
	next.Data, next.OwnerReferences, next.Labels = want.Data, want.OwnerReferences, want.Labels
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[jobv1.AnnotationGeneration] = want.Annotations[jobv1.AnnotationGeneration]
	if _, err := cms.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return 0, 0, fmt.Errorf("update ConfigMap %s: %w", want.Name, err)
	}
	if stored == gen {
		return configUnchanged, stored, nil // the same generation, rewritten (new owner, say)
	}
	return configWritten, stored, nil
}

// storedGeneration is the generation a ConfigMap describes; -1 if it says
// none, so that any generation replaces it.
func storedGeneration(cm *corev1.ConfigMap) int64 {
	gen, err := strconv.ParseInt(cm.Annotations[jobv1.AnnotationGeneration], 10, 64)
	if err != nil {
		return -1
	}
	return gen
}

// raced reports whether a write lost a race with another writer's.
func raced(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }

func ownerRef(obj metav1.Object) metav1.OwnerReference {
	ref := metav1.OwnerReference{Name: obj.GetName(), UID: obj.GetUID()}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		ref.APIVersion, ref.Kind = u.GetAPIVersion(), u.GetKind()
	}
	return ref
}

func sameOwners(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID {
			return false
		}
	}
	return true
}

// report writes the bridge's record of a job when it changes, and says so
// in the log and, on the workload, as an Event.
func (t *term) report(ctx context.Context, job string, primary *workload, replicas int, problem string) {
	t.metrics.seen(job)
	if problem != "" {
		t.metrics.problems.WithLabelValues(job).Set(1)
	} else {
		t.metrics.problems.WithLabelValues(job).Set(0)
	}
	next := membership.BridgeStatus{Replicas: replicas, Problem: problem}
	if primary != nil {
		next.Workload = primary.String()
	}
	last := t.reported[job]
	if last.written && last.bridge == next {
		return
	}
	switch {
	case problem != "" && problem != last.bridge.Problem:
		t.logger.Warn("job needs attention", "job", job, "problem", problem)
		if primary != nil {
			t.Recorder.Event(primary.obj, corev1.EventTypeWarning, "BridgeProblem", problem)
		}
	case problem == "" && last.bridge.Problem != "":
		t.logger.Info("job problem solved", "job", job)
	}
	stamped := next
	stamped.UpdatedAt = time.Now()
	val, err := membership.Encode(stamped)
	if err == nil {
		_, err = t.cfg.Etcd.Put(ctx, t.cfg.Keys.Bridge(job), val)
	}
	if err != nil {
		t.logger.Warn("bridge status not written", "job", job, "error", err)
		return
	}
	t.reported[job] = reportedState{bridge: next, written: true}
}
