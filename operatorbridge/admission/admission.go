package admission

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueconstants "sigs.k8s.io/kueue/pkg/controller/constants"
)

// Labels and the finalizer of Kueue's contract.
const (
	// QueueLabel on a job names the LocalQueue of its namespace that
	// admits it: the job is Kueue's.
	QueueLabel = kueueconstants.QueueLabel
	// PriorityClassLabel on a job names its WorkloadPriorityClass.
	PriorityClassLabel = kueueconstants.WorkloadPriorityClassLabel
	// JobUIDLabel on a Workload is its job's UID.
	JobUIDLabel = kueueconstants.JobUIDLabel
	// Finalizer keeps a Workload while its job may hold the quota.
	Finalizer = kueue.ResourceInUseFinalizerName
	// ReasonPending is the QuotaReserved reason of a Workload waiting, as
	// Kueue writes it with its UnadmittedWorkloadsObservability gate off
	// (the default; on, Kueue's scheduler writes finer reasons over it).
	ReasonPending = "Pending"
	// hashAnnotation on a Workload is the hash of the request it was
	// made from: a request that changed no longer matches.
	hashAnnotation = "elastic.workload-request"
)

// Kueue's resources.
var (
	Workloads               = kueue.SchemeGroupVersion.WithResource("workloads")
	ResourceFlavors         = kueue.SchemeGroupVersion.WithResource("resourceflavors")
	LocalQueues             = kueue.SchemeGroupVersion.WithResource("localqueues")
	ClusterQueues           = kueue.SchemeGroupVersion.WithResource("clusterqueues")
	WorkloadPriorityClasses = kueue.SchemeGroupVersion.WithResource("workloadpriorityclasses")
)

// GroupVersionKind of a Workload.
var WorkloadKind = schema.GroupVersionKind{Group: kueue.SchemeGroupVersion.Group, Version: kueue.SchemeGroupVersion.Version, Kind: "Workload"}

// PodSet is one role's pods as the job asks Kueue for them.
type PodSet struct {
	Name string
	// Count is the most pods; MinCount, when above 0 and below Count, the
	// fewest the job runs on: Kueue admits the largest count between them
	// that its quota allows.
	Count, MinCount int32
	Template        corev1.PodTemplateSpec
}

// Priority is a job's WorkloadPriorityClass and its value.
type Priority struct {
	Class string
	Value int32
}

// Request is the Workload a queued job asks for.
type Request struct {
	// Owner is the job, as the controller of what is made for it.
	Owner     metav1.OwnerReference
	Namespace string
	// Labels go on the Workload besides JobUIDLabel: the controller's
	// label of the job, to find it by.
	Labels   map[string]string
	Queue    string
	Priority *Priority
	PodSets  []PodSet
}

// WorkloadName is the name of a job's Workload, as Kueue's jobframework
// names those of its built-in kinds: the kind and job's names and a hash
// of the job's identity.
func WorkloadName(kind, job string, uid types.UID) string {
	h := sha1.Sum([]byte(strings.ToLower(kind) + "\n" + job + "\n" + string(uid)))
	prefix := strings.ToLower(kind) + "-" + job
	if len(prefix) > 240 {
		prefix = prefix[:240]
	}
	return prefix + "-" + hex.EncodeToString(h[:])[:5]
}

// Workload is the Workload the request asks for.
func (r Request) Workload() *kueue.Workload {
	labels := maps.Clone(r.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[JobUIDLabel] = string(r.Owner.UID)
	owner := r.Owner
	owner.Controller, owner.BlockOwnerDeletion = ptr(true), ptr(true)
	wl := &kueue.Workload{
		TypeMeta: metav1.TypeMeta{APIVersion: kueue.SchemeGroupVersion.String(), Kind: "Workload"},
		ObjectMeta: metav1.ObjectMeta{
			Name: WorkloadName(r.Owner.Kind, r.Owner.Name, r.Owner.UID), Namespace: r.Namespace,
			Labels: labels, Finalizers: []string{Finalizer}, OwnerReferences: []metav1.OwnerReference{owner},
		},
	}
	r.fill(wl)
	return wl
}

// Update makes wl, not holding quota, ask for the request.
func (r Request) Update(wl *kueue.Workload) *kueue.Workload {
	next := wl.DeepCopy()
	r.fill(next)
	// A slice that lost its admission asks anew, as the job's Workload.
	delete(next.Annotations, SliceReplacementFor)
	return next
}

func (r Request) fill(wl *kueue.Workload) {
	wl.Spec.QueueName = kueue.LocalQueueName(r.Queue)
	wl.Spec.PodSets = nil
	for _, p := range r.PodSets {
		ps := kueue.PodSet{Name: kueue.NewPodSetReference(p.Name), Count: p.Count, Template: podSetTemplate(p.Template)}
		if p.MinCount > 0 && p.MinCount < p.Count {
			ps.MinCount = ptr(p.MinCount)
		}
		wl.Spec.PodSets = append(wl.Spec.PodSets, ps)
	}
	wl.Spec.PriorityClassRef, wl.Spec.Priority = nil, nil
	if r.Priority != nil {
		wl.Spec.PriorityClassRef, wl.Spec.Priority = kueue.NewWorkloadPriorityClassRef(r.Priority.Class), ptr(r.Priority.Value)
	}
	if wl.Annotations == nil {
		wl.Annotations = map[string]string{}
	}
	wl.Annotations[hashAnnotation] = r.hash()
}

// podSetTemplate is a pod template as a Workload may hold it: its
// metadata only labels and annotations.
func podSetTemplate(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	out := *t.DeepCopy()
	out.ObjectMeta = metav1.ObjectMeta{Labels: out.Labels, Annotations: out.Annotations}
	return out
}

func (r Request) hash() string {
	data, _ := json.Marshal(struct {
		Queue    string
		Priority *Priority
		PodSets  []PodSet
	}{r.Queue, r.Priority, r.PodSets})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// Matches reports whether wl was made from a request equal to r.
func (r Request) Matches(wl *kueue.Workload) bool {
	return wl.Annotations[hashAnnotation] == r.hash()
}

// Phase is where a job's Workload stands.
type Phase string

const (
	// Pending: not admitted; the job waits, suspended.
	Pending Phase = "Pending"
	// Admitted: the job runs, at the admitted counts.
	Admitted Phase = "Admitted"
	// Evicted: the job must stop and give the quota back (Release).
	Evicted Phase = "Evicted"
	// Finished: the Workload is done with.
	Finished Phase = "Finished"
)

// State is what a Workload says of its job.
type State struct {
	Phase Phase
	// ClusterQueue admitted it (Admitted, Evicted).
	ClusterQueue string
	// Counts are the admitted pods by pod set; Flavors the admitted
	// ResourceFlavors' names by pod set, sorted.
	Counts  map[string]int32
	Flavors map[string][]string
	// ResourceFlavors are the admitted flavor of each resource, by pod
	// set.
	ResourceFlavors map[string]map[corev1.ResourceName]string
	// Updates are the admission checks' changes to the pods, by pod set.
	Updates map[string][]kueue.PodSetUpdate
	// Reason and Message say why: Kueue's QuotaReserved condition while
	// Pending, its Evicted condition once Evicted, Finished's.
	Reason, Message string
}

// Read says what wl makes of its job.
func Read(wl *kueue.Workload) State {
	conds := wl.Status.Conditions
	if c := apimeta.FindStatusCondition(conds, kueue.WorkloadFinished); c != nil && c.Status == metav1.ConditionTrue {
		return State{Phase: Finished, Reason: c.Reason, Message: c.Message}
	}
	reserved := wl.Status.Admission != nil && apimeta.IsStatusConditionTrue(conds, kueue.WorkloadQuotaReserved)
	if c := apimeta.FindStatusCondition(conds, kueue.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue && reserved {
		s := assigned(wl)
		s.Phase, s.Reason, s.Message = Evicted, c.Reason, c.Message
		return s
	}
	if reserved && apimeta.IsStatusConditionTrue(conds, kueue.WorkloadAdmitted) {
		s := assigned(wl)
		s.Phase = Admitted
		return s
	}
	s := State{Phase: Pending, Reason: ReasonPending, Message: "waiting for Kueue to reserve quota"}
	if c := apimeta.FindStatusCondition(conds, kueue.WorkloadQuotaReserved); c != nil {
		s.Reason, s.Message = c.Reason, c.Message
		if c.Status == metav1.ConditionTrue {
			// Quota reserved; admission checks pending.
			s.Reason, s.Message = "AdmissionChecksPending", "quota reserved; waiting for the admission checks"
		}
	}
	return s
}

// assigned reads the admission's counts, flavors and updates.
func assigned(wl *kueue.Workload) State {
	s := State{ClusterQueue: string(wl.Status.Admission.ClusterQueue), Counts: map[string]int32{},
		Flavors: map[string][]string{}, Updates: map[string][]kueue.PodSetUpdate{}, ResourceFlavors: map[string]map[corev1.ResourceName]string{}}
	for _, a := range wl.Status.Admission.PodSetAssignments {
		name := string(a.Name)
		count := int32(-1)
		if a.Count != nil {
			count = *a.Count
		}
		for _, ps := range wl.Spec.PodSets {
			if ps.Name == a.Name && count < 0 {
				count = ps.Count // a nil count is the pod set's
			}
		}
		for _, rp := range wl.Status.ReclaimablePods {
			if rp.Name == a.Name {
				count -= rp.Count // given back since (a scale-down)
			}
		}
		s.Counts[name] = max(count, 0)
		var flavors []string
		s.ResourceFlavors[name] = map[corev1.ResourceName]string{}
		for res, f := range a.Flavors {
			s.ResourceFlavors[name][res] = string(f)
			if !slices.Contains(flavors, string(f)) {
				flavors = append(flavors, string(f))
			}
		}
		slices.Sort(flavors)
		s.Flavors[name] = flavors
	}
	for _, ac := range wl.Status.AdmissionChecks {
		for _, u := range ac.PodSetUpdates {
			s.Updates[string(u.Name)] = append(s.Updates[string(u.Name)], u)
		}
	}
	return s
}

// Release gives back an evicted Workload's quota once its job stopped,
// as Kueue's jobframework does: requeued if the eviction asks for it
// (preemption, node failures), its admission cleared. The Workload keeps
// its place in the queue: Kueue orders evicted Workloads by creation.
func Release(wl *kueue.Workload, now time.Time) {
	ev := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted)
	reason, message := kueue.WorkloadEvictedByPreemption, "the job stopped"
	if ev != nil {
		reason, message = ev.Reason, ev.Message
	}
	requeue := metav1.ConditionFalse
	if reason == kueue.WorkloadEvictedByPreemption || reason == kueue.WorkloadEvictedDueToNodeFailures {
		requeue = metav1.ConditionTrue
	}
	at := metav1.NewTime(now)
	set := func(typ string, status metav1.ConditionStatus, reason, message string) {
		apimeta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message,
			ObservedGeneration: wl.Generation, LastTransitionTime: at})
	}
	set(kueue.WorkloadRequeued, requeue, reason, message)
	set(kueue.WorkloadQuotaReserved, metav1.ConditionFalse, ReasonPending, "the job stopped: "+message)
	set(kueue.WorkloadAdmitted, metav1.ConditionFalse, kueue.WorkloadAdmittedReasonNoReservation, "the job stopped and released its quota")
	wl.Status.Admission = nil
}

// Reclaim gives back the quota of the pods of pod set name beyond keep,
// of an admitted Workload: its status's reclaimablePods, which Kueue
// takes off the Workload's usage (only ever more: Kueue refuses fewer
// while the quota is held). It reports whether that changed anything.
func Reclaim(wl *kueue.Workload, name string, keep int32) bool {
	if wl.Status.Admission == nil {
		return false
	}
	var admitted int32 = -1
	for _, a := range wl.Status.Admission.PodSetAssignments {
		if string(a.Name) == name && a.Count != nil {
			admitted = *a.Count
		}
	}
	for _, ps := range wl.Spec.PodSets {
		if string(ps.Name) == name && admitted < 0 {
			admitted = ps.Count
		}
	}
	reclaim := admitted - keep
	for i, rp := range wl.Status.ReclaimablePods {
		if string(rp.Name) != name {
			continue
		}
		if reclaim <= rp.Count {
			return false
		}
		wl.Status.ReclaimablePods[i].Count = reclaim
		return true
	}
	if reclaim <= 0 {
		return false
	}
	wl.Status.ReclaimablePods = append(wl.Status.ReclaimablePods, kueue.ReclaimablePod{Name: kueue.PodSetReference(name), Count: reclaim})
	return true
}

// Finish marks a Workload finished: its job ended.
func Finish(wl *kueue.Workload, succeeded bool, message string, now time.Time) {
	reason := kueue.WorkloadFinishedReasonSucceeded
	if !succeeded {
		reason = kueue.WorkloadFinishedReasonFailed
	}
	apimeta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadFinished, Status: metav1.ConditionTrue,
		Reason: reason, Message: message, ObservedGeneration: wl.Generation, LastTransitionTime: metav1.NewTime(now)})
}

// Place puts a pod template on the admitted flavors — their node labels in
// its node selector, their tolerations added — and applies the admission
// checks' updates, as Kueue's jobframework does when it starts a job.
func Place(t *corev1.PodTemplateSpec, flavors []kueue.ResourceFlavor, updates []kueue.PodSetUpdate) error {
	selector := maps.Clone(t.Spec.NodeSelector)
	if selector == nil {
		selector = map[string]string{}
	}
	merge := func(labels map[string]string, from string) error {
		for k, v := range labels {
			if have, ok := selector[k]; ok && have != v {
				return fmt.Errorf("%s sets node label %s=%s, and the pods' nodeSelector %s=%s", from, k, v, k, have)
			}
			selector[k] = v
		}
		return nil
	}
	for _, f := range flavors {
		if err := merge(f.Spec.NodeLabels, "ResourceFlavor "+f.Name); err != nil {
			return err
		}
		t.Spec.Tolerations = appendNew(t.Spec.Tolerations, f.Spec.Tolerations)
	}
	for _, u := range updates {
		if err := merge(u.NodeSelector, "an admission check"); err != nil {
			return err
		}
		t.Spec.Tolerations = appendNew(t.Spec.Tolerations, u.Tolerations)
		if len(u.Labels) > 0 && t.Labels == nil {
			t.Labels = map[string]string{}
		}
		maps.Copy(t.Labels, u.Labels)
		if len(u.Annotations) > 0 && t.Annotations == nil {
			t.Annotations = map[string]string{}
		}
		maps.Copy(t.Annotations, u.Annotations)
	}
	if len(selector) > 0 {
		t.Spec.NodeSelector = selector
	}
	return nil
}

func appendNew(have, add []corev1.Toleration) []corev1.Toleration {
	for _, t := range add {
		if !slices.ContainsFunc(have, func(h corev1.Toleration) bool { return h.MatchToleration(&t) && h == t }) {
			have = append(have, t)
		}
	}
	return have
}

func ptr[T any](v T) *T { return &v }
