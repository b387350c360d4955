package jobcontroller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge/admission"
	"github.com/elastictraining/coordinator/operatorbridge/controller"
)

// queueView is what Kueue's admission made of a queued job at its last
// reconcile: the job's Admitted condition and a problem, if any.
type queueView struct {
	admitted bool
	reason   string
	message  string
	problem  string
	workload string
	evicted  bool
	// recheck, if set, is when to look at the job again: nothing watched
	// says when its queue has room to grow it.
	recheck   time.Duration
	suspended bool // the resource's own suspend field, as the integration keeps it
}

// startWorkloadInformer watches the Workloads the controller made (they
// carry the job label); a change queues the job that owns one.
func (t *term) startWorkloadInformer(stop <-chan struct{}) {
	inf := dynamicinformer.NewFilteredDynamicInformer(t.cfg.Dynamic, admission.Workloads, t.cfg.Namespace, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) { o.LabelSelector = jobv1.LabelJob })
	_ = inf.Informer().SetWatchErrorHandlerWithContext(t.watchError(admission.Workloads.GroupResource().String()))
	_, _ = inf.Informer().AddEventHandler(controller.OnObject(func(m metav1.Object) {
		if ref := metav1.GetControllerOf(m); ref != nil && t.kinds[ref.Kind] != nil {
			t.Queue.Add(key(ref.Kind, m.GetNamespace(), ref.Name))
		}
	}))
	t.workloads, t.workloadsSynced = inf.Lister(), inf.Informer().HasSynced
	go inf.Informer().Run(stop)
}

// admit runs a job labelled with a Kueue queue as Kueue admits it: it
// makes the job's Workload, keeps the job suspended until the Workload is
// admitted, then runs it at the admitted worker count on the admitted
// flavors, stops it when the Workload is evicted and gives the quota back
// once every trainer stopped and the pods are gone, and finishes the
// Workload when the job ends. It changes j to what may run now. A job
// without the label is left alone (nil).
func (t *term) admit(ctx context.Context, k *servedKind, u *unstructured.Unstructured, j *Job) (*queueView, error) {
	queue := u.GetLabels()[admission.QueueLabel]
	synced := t.workloads != nil && t.workloadsSynced()
	var set jobWorkloads
	var err error
	labelGone := false
	if queue == "" {
		var stays bool
		if set, stays, err = t.unlabelled(ctx, u, synced); !stays || err != nil {
			return nil, err
		}
		queue, labelGone = string(set.current.Spec.QueueName), true
	}
	q := newQueuedJob(t, k, u, j, queue)
	if t.workloads == nil {
		q.v.problem = "the job is labelled " + admission.QueueLabel + "=" + queue + " and Kueue's integration is off (`coordinator serve --kueue`): it stays suspended"
		return q.hold(ctx, "KueueOff", q.v.problem)
	}
	if !synced {
		// Nothing is decided on a view not read yet: a leader's new term
		// must not stop what runs.
		return nil, errWorkloadsNotListed
	}
	if set.current == nil && set.deleted == nil && set.finished == nil {
		if set, err = t.workloadsOf(ctx, u); err != nil {
			return nil, err
		}
	}
	q.rec = t.recordsOf(j.ID)
	q.ended = q.rec.Spec != nil && q.rec.Spec.Owner == j.Spec.Owner && q.rec.Status != nil && q.rec.Status.Phase.Done()
	var reason string
	if q.req, reason, err = t.workloadRequest(ctx, u, j, queue); err != nil {
		return nil, err
	}
	switch {
	case set.deleted != nil:
		return q.workloadDeleted(ctx, set.deleted, set.growth)
	case reason != "" && set.current == nil:
		q.v.problem = reason
		return q.hold(ctx, "Inadmissible", reason)
	}
	if labelGone {
		q.v.problem = fmt.Sprintf("the label %s was removed while the job holds its admission in LocalQueue %s: it stays Kueue's; to take it out, deactivate its Workload first",
			admission.QueueLabel, queue)
	}
	if set.current == nil {
		return q.noWorkload(ctx, set.finished)
	}
	return q.byWorkload(ctx, set.current, set.growth)
}

// unlabelled decides on a job without the queue label. One that holds
// its admission stays Kueue's (stays): Kueue's integrations refuse the
// change then. One that waits leaves the queue, its Workloads deleted;
// one that leaves, or has none, is forgotten.
func (t *term) unlabelled(ctx context.Context, u *unstructured.Unstructured, synced bool) (set jobWorkloads, stays bool, err error) {
	if !synced {
		delete(t.queued, keyOf(u))
		return set, false, nil
	}
	if set, err = t.workloadsOf(ctx, u); err != nil {
		return set, false, err
	}
	switch {
	case set.current != nil && holdsAdmission(set.current):
		return set, true, nil
	case set.current != nil || set.growth != nil:
		// Waiting, it leaves the queue.
		for _, wl := range []*kueue.Workload{set.current, set.growth} {
			if wl != nil {
				if err := t.deleteWorkload(ctx, wl); err != nil {
					return set, false, err
				}
			}
		}
		t.Recorder.Eventf(u, corev1.EventTypeNormal, "LeftQueue", "label %s removed: Workload %s deleted; the job is no longer Kueue's", admission.QueueLabel, set.current.Name)
	}
	delete(t.queued, keyOf(u))
	return set, false, nil
}

// queuedJob is one reconcile's decision on a job of a Kueue queue: the job
// as it may run now, and the view of it that its status shows.
type queuedJob struct {
	t     *term
	k     *servedKind
	u     *unstructured.Unstructured
	j     *Job
	v     *queueView
	queue string
	// byHand: the job was held suspended, and its field says otherwise
	// now (a new job's says nothing yet).
	byHand bool
	req    admission.Request
	rec    membership.JobRecords
	ended  bool // the job ran and is done
}

// newQueuedJob starts the decision on a job of queue, and keeps its view.
func newQueuedJob(t *term, k *servedKind, u *unstructured.Unstructured, j *Job, queue string) *queuedJob {
	j.Spec.Queue = queue
	before := t.queued[keyOf(u)]
	v := &queueView{suspended: suspendField(k, u)}
	t.queued[keyOf(u)] = v
	return &queuedJob{t: t, k: k, u: u, j: j, v: v, queue: queue,
		byHand: before != nil && before.suspended && !before.admitted && !v.suspended}
}

// hold keeps the job suspended, saying why.
func (q *queuedJob) hold(ctx context.Context, reason, message string) (*queueView, error) {
	q.j.Spec.Suspend = true
	q.v.reason, q.v.message = reason, message
	return q.v, q.t.keepSuspendField(ctx, q.k, q.u, q.v, true, message)
}

// workloadDeleted stops a job whose Workload a user deleted while it was
// admitted; the quota goes with the Workload once nothing of the job
// runs, and a new Workload asks for its admission after.
func (q *queuedJob) workloadDeleted(ctx context.Context, deleted, growth *kueue.Workload) (*queueView, error) {
	t := q.t
	if growth != nil {
		if err := t.withdraw(ctx, q.u, growth, "the admission it would have grown was deleted"); err != nil {
			return q.v, err
		}
	}
	if !q.v.suspended {
		t.Recorder.Eventf(q.u, corev1.EventTypeNormal, "Stopped", "Workload %s deleted: stopping the job gracefully; a new Workload asks for its admission once it stopped", deleted.Name)
	}
	if t.stoppedAndGone(q.u, q.j, q.rec) && !q.ended {
		if err := t.dropFinalizer(ctx, deleted.Namespace, deleted.Name); err != nil {
			return q.v, err
		}
	}
	return q.hold(ctx, "WorkloadDeleted", fmt.Sprintf("Workload %s was deleted: the job stops, then asks to be admitted again", deleted.Name))
}

// noWorkload decides on a job that has no Workload holding or waiting for
// its admission: one that ended lets go of its finished Workload; one
// whose Workload finished without it does not run; any other asks for
// admission with a new Workload.
func (q *queuedJob) noWorkload(ctx context.Context, finished *kueue.Workload) (*queueView, error) {
	switch {
	case q.ended && finished != nil:
		// Finished as the job ended: it holds nothing now.
		return q.v, q.t.dropFinalizer(ctx, finished.Namespace, finished.Name)
	case q.ended:
		return q.v, nil
	case finished != nil:
		st := admission.Read(finished)
		return q.hold(ctx, st.Reason, fmt.Sprintf("Workload %s is finished (%s: %s): the job does not run", finished.Name, st.Reason, st.Message))
	}
	wl := q.req.Workload()
	if err := q.t.createWorkload(ctx, wl); err != nil {
		q.v.problem = err.Error()
		_, _ = q.hold(ctx, "WorkloadNotCreated", q.v.problem)
		return q.v, err
	}
	q.t.Recorder.Eventf(q.u, corev1.EventTypeNormal, "CreatedWorkload", "Workload %s in LocalQueue %s", wl.Name, q.queue)
	return q.hold(ctx, admission.ReasonPending, "waiting for Kueue to admit Workload "+wl.Name)
}

// byWorkload decides on a job by its current Workload's state: finished
// with the job, stopped when evicted, held while pending, run when
// admitted. A request to grow an admission that is gone is withdrawn.
func (q *queuedJob) byWorkload(ctx context.Context, current, growth *kueue.Workload) (*queueView, error) {
	q.v.workload = current.Name
	st := admission.Read(current)
	if q.ended {
		if growth != nil {
			if err := q.t.withdraw(ctx, q.u, growth, "the job ended"); err != nil {
				return q.v, err
			}
		}
		return q.v, q.t.finishWorkload(ctx, current, st, q.rec.Status)
	}
	if growth != nil && st.Phase != admission.Admitted {
		if err := q.t.withdraw(ctx, q.u, growth, "the admission it would have grown is gone"); err != nil {
			return q.v, err
		}
	}
	switch st.Phase {
	case admission.Evicted:
		return q.evicted(ctx, current, st)
	case admission.Pending:
		return q.pending(ctx, current, st)
	}
	return q.admitted(ctx, current, growth, st)
}

// evicted stops a job whose Workload Kueue evicted, and gives the quota
// back once every trainer stopped and the pods are gone.
func (q *queuedJob) evicted(ctx context.Context, current *kueue.Workload, st admission.State) (*queueView, error) {
	t, v := q.t, q.v
	v.evicted = true
	q.j.Spec.Suspend = true
	if !v.suspended {
		t.Recorder.Eventf(q.u, corev1.EventTypeNormal, "Stopped", "Workload %s evicted (%s): %s; stopping the job gracefully", current.Name, st.Reason, st.Message)
	}
	if err := t.keepSuspendField(ctx, q.k, q.u, v, true, ""); err != nil {
		return v, err
	}
	v.reason, v.message = st.Reason, "evicted: "+st.Message+"; the job stops and gives its quota back"
	if !t.stoppedAndGone(q.u, q.j, q.rec) {
		return v, nil
	}
	return v, t.releaseWorkload(ctx, q.u, current, st)
}

// pending holds a job whose Workload waits for admission, the Workload
// following the job's pod sets while it holds no quota, and says what
// keeps it waiting.
func (q *queuedJob) pending(ctx context.Context, current *kueue.Workload, st admission.State) (*queueView, error) {
	t, v := q.t, q.v
	if !q.req.Matches(current) && current.Status.Admission == nil {
		// Not holding quota: its pod sets may change.
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(q.req.Update(current))
		if err != nil {
			return nil, err
		}
		res := t.cfg.Dynamic.Resource(admission.Workloads).Namespace(q.u.GetNamespace())
		if _, err := res.Update(ctx, &unstructured.Unstructured{Object: raw}, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("update Workload %s: %w", current.Name, err)
		}
	}
	msg := st.Message
	if missing := t.missingQueue(ctx, q.u.GetNamespace(), q.queue); missing != "" {
		msg, v.problem = missing, missing
	}
	if p := unhonouredMinCount(q.req, current); p != "" {
		v.problem = strings.TrimPrefix(v.problem+"; "+p, "; ")
	}
	if q.byHand {
		t.Recorder.Eventf(q.u, corev1.EventTypeWarning, "Stopped", "not admitted by its ClusterQueue (Workload %s: %s): suspended again; Kueue keeps the suspend of a queued job", current.Name, msg)
	}
	return q.hold(ctx, st.Reason, msg)
}

// admitted runs a job at its admitted counts on the admitted flavors, and
// grows or shrinks its Workload to what the job asks for now.
func (q *queuedJob) admitted(ctx context.Context, current, growth *kueue.Workload, st admission.State) (*queueView, error) {
	t, v := q.t, q.v
	if err := t.runAdmitted(ctx, q.u, q.j, st); err != nil {
		v.problem = err.Error()
		return q.hold(ctx, "AdmittedOnFlavorsNotUsable", v.problem)
	}
	if p := unhonouredMinCount(q.req, current); p != "" && admission.Replaces(current) == "" {
		v.problem = p
	}
	v.admitted, v.reason = true, "Admitted"
	v.message = fmt.Sprintf("admitted by ClusterQueue %s: %s", st.ClusterQueue, english.Count(q.j.Spec.Workers().Max, "worker"))
	if v.suspended {
		t.Recorder.Eventf(q.u, corev1.EventTypeNormal, "Started", "Workload %s %s", current.Name, v.message)
	}
	if err := t.keepSuspendField(ctx, q.k, q.u, v, false, ""); err != nil {
		return v, err
	}
	return v, t.grow(ctx, q.u, q.req, current, growth, st, v)
}

// workloadRequest is the Workload the job asks for, or why it cannot ask.
func (t *term) workloadRequest(ctx context.Context, u *unstructured.Unstructured, j *Job, queue string) (admission.Request, string, error) {
	req := admission.Request{Owner: j.Owner, Namespace: j.Namespace, Labels: map[string]string{jobv1.LabelJob: j.ID}, Queue: queue}
	if class := u.GetLabels()[admission.PriorityClassLabel]; class != "" {
		obj, err := t.cfg.Dynamic.Resource(admission.WorkloadPriorityClasses).Get(ctx, class, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return req, fmt.Sprintf("WorkloadPriorityClass %s (label %s) does not exist", class, admission.PriorityClassLabel), nil
		case err != nil:
			return req, "", fmt.Errorf("get WorkloadPriorityClass %s: %w", class, err)
		}
		var wpc kueue.WorkloadPriorityClass
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &wpc); err != nil {
			return req, "", err
		}
		req.Priority = &admission.Priority{Class: class, Value: wpc.Value}
	}
	for _, r := range j.Roles {
		ps := admission.PodSet{Name: string(r.Name), Count: int32(r.Replicas), Template: r.Template}
		if r.Name == membership.RoleWorker {
			// An autoscaled job asks for its replicas (the target) at
			// most: the autoscaler leaves it to Kueue.
			np := j.Spec.Workers()
			ps.Count, ps.MinCount = int32(np.Max+j.Spec.Spares), int32(np.Min+j.Spec.Spares)
		}
		req.PodSets = append(req.PodSets, ps)
	}
	return req, "", nil
}

// runAdmitted sets the job to run at the admitted counts, its pods on the
// admitted flavors.
func (t *term) runAdmitted(ctx context.Context, u *unstructured.Unstructured, j *Job, st admission.State) error {
	j.Spec.Suspend = false
	for i := range j.Roles {
		r := &j.Roles[i]
		name := string(kueue.NewPodSetReference(string(r.Name)))
		count, ok := st.Counts[name]
		if !ok {
			return fmt.Errorf("the admission of ClusterQueue %s has no pod set %s", st.ClusterQueue, name)
		}
		r.Replicas = int(count)
		if r.Name == membership.RoleWorker {
			// Never more than the job asks for now: scaled down, it
			// runs smaller at once, and its Workload follows (grow).
			workers := min(int(count)-j.Spec.Spares, j.Spec.Workers().Max)
			if workers < 1 {
				return fmt.Errorf("admitted %d worker pods, no more than the job's %d spares", count, j.Spec.Spares)
			}
			j.Spec.NP = membership.NP{Min: min(j.Spec.NP.Min, workers), Max: workers}
			j.Spec.Target = 0
			r.Replicas = workers + j.Spec.Spares
		}
		var flavors []kueue.ResourceFlavor
		for _, f := range st.Flavors[name] {
			obj, err := t.cfg.Dynamic.Resource(admission.ResourceFlavors).Get(ctx, f, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get ResourceFlavor %s: %w", f, err)
			}
			var rf kueue.ResourceFlavor
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &rf); err != nil {
				return err
			}
			flavors = append(flavors, rf)
		}
		r.Template = *r.Template.DeepCopy()
		if err := admission.Place(&r.Template, flavors, st.Updates[name]); err != nil {
			return fmt.Errorf("the %s pods cannot go on the admitted flavors: %w", r.Name, err)
		}
	}
	return nil
}

// missingQueue says, if the job's LocalQueue does not exist, so.
func (t *term) missingQueue(ctx context.Context, ns, queue string) string {
	_, err := t.cfg.Dynamic.Resource(admission.LocalQueues).Namespace(ns).Get(ctx, queue, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Sprintf("LocalQueue %s does not exist in namespace %s: the job stays suspended until it does", queue, ns)
	}
	return ""
}

// unhonouredMinCount says when Kueue dropped the workers' minCount (its
// PartialAdmission gate off): the job is then admitted only whole.
func unhonouredMinCount(req admission.Request, wl *kueue.Workload) string {
	for _, want := range req.PodSets {
		if want.MinCount <= 0 || want.MinCount >= want.Count {
			continue
		}
		for _, have := range wl.Spec.PodSets {
			if string(have.Name) == want.Name && have.MinCount == nil {
				return fmt.Sprintf("Kueue dropped the %s pod set's minCount %d (is its PartialAdmission feature gate off?): the job is admitted only at %d",
					want.Name, want.MinCount, want.Count)
			}
		}
	}
	return ""
}

// suspendField is the resource's own suspend: an ElasticJob's
// spec.suspend, an MSJob's spec.runPolicy.suspend, a PaddleJob's
// annotation.
func suspendField(k *servedKind, u *unstructured.Unstructured) bool {
	switch k.Name {
	case jobv1.Kind:
		v, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend")
		return v
	case MSJobs.Name:
		v, _, _ := unstructured.NestedBool(u.Object, "spec", "runPolicy", "suspend")
		return v
	}
	return strings.TrimSpace(u.GetAnnotations()[jobv1.AnnotationSuspend]) == "true"
}

// keepSuspendField makes the resource's suspend field say suspend, as
// Kueue's integrations keep their jobs' suspend: true until admitted,
// false while admitted.
func (t *term) keepSuspendField(ctx context.Context, k *servedKind, u *unstructured.Unstructured, v *queueView, suspend bool, _ string) error {
	if v.suspended == suspend {
		return nil
	}
	var patch string
	switch k.Name {
	case jobv1.Kind:
		patch = fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend)
	case MSJobs.Name:
		patch = fmt.Sprintf(`{"spec":{"runPolicy":{"suspend":%t}}}`, suspend)
	default:
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:"%t"}}}`, jobv1.AnnotationSuspend, suspend)
	}
	if _, err := t.cfg.Dynamic.Resource(k.Resource).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("set the suspend of %s %s to %t: %w", u.GetKind(), u.GetName(), suspend, err)
	}
	v.suspended = suspend
	return nil
}

// setAdmittedCondition puts the queue's view in a job's conditions.
func setAdmittedCondition(conds *[]metav1.Condition, v *queueView, gen int64) {
	status := metav1.ConditionFalse
	if v.admitted {
		status = metav1.ConditionTrue
	}
	apimeta.SetStatusCondition(conds, metav1.Condition{Type: jobv1.ConditionAdmitted, Status: status, Reason: or(v.reason, "Pending"),
		Message: or(v.message, "waiting for Kueue"), ObservedGeneration: gen})
}

func jsonList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(quoted, ",") + "]"
}

// errWorkloadsNotListed: Kueue's Workloads are not listed yet (a new
// term, Kueue not installed, RBAC); the job is looked at again.
var errWorkloadsNotListed = errors.New("no list of Kueue's Workloads yet: is Kueue installed, and may the coordinator list them (deploy/kueue)?")
