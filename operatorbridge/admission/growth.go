package admission

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// SliceReplacementFor on a Workload names, as NAMESPACE/NAME, the admitted
// Workload of the same job it replaces at a new size: Kueue's workload
// slices (pkg/workloadslicing). Kueue's scheduler charges the new slice
// only what it adds, and once it admits it, finishes the old one
// (reason WorkloadSliceReplaced): the job keeps running on the old
// admission until the new one is granted.
const SliceReplacementFor = "kueue.x-k8s.io/workload-slice-replacement-for"

// Slice is the Workload that asks for the job at workers worker pods in
// place of the admitted Workload current: the request's pod sets, the
// workers fixed at that count (a slice cannot be admitted partially).
func (r Request) Slice(current *kueue.Workload, workers int32, now time.Time) *kueue.Workload {
	grown := r
	grown.PodSets = append([]PodSet(nil), r.PodSets...)
	for i := range grown.PodSets {
		if grown.PodSets[i].Name == "worker" {
			grown.PodSets[i].Count, grown.PodSets[i].MinCount = workers, 0
		}
	}
	wl := grown.Workload()
	h := sha1.Sum([]byte(current.Name + "\n" + strconv.FormatInt(now.UnixNano(), 10)))
	wl.Name = current.Name + "-" + hex.EncodeToString(h[:])[:5]
	if len(wl.Name) > 253 {
		wl.Name = wl.Name[len(wl.Name)-253:]
	}
	wl.Annotations[SliceReplacementFor] = current.Namespace + "/" + current.Name
	wl.Annotations[kueue.WorkloadSliceNameAnnotation] = current.Name
	return wl
}

// Replaces is the Workload name a slice replaces, or "".
func Replaces(wl *kueue.Workload) string {
	key := wl.Annotations[SliceReplacementFor]
	if key == "" {
		return ""
	}
	if i := len(wl.Namespace) + 1; len(key) > i && key[:i] == wl.Namespace+"/" {
		return key[i:]
	}
	return ""
}

// FinishReplaced marks an old slice finished, replaced: what Kueue's
// scheduler does once it admitted the new one, done here if it did not.
func FinishReplaced(wl *kueue.Workload, by string, now time.Time) {
	Finish(wl, true, "replaced by Workload "+by, now)
	for i := range wl.Status.Conditions {
		if wl.Status.Conditions[i].Type == kueue.WorkloadFinished {
			wl.Status.Conditions[i].Reason = kueue.WorkloadSliceReplaced
		}
	}
}

// PodRequest is what one pod of a template asks for, as Kueue counts it:
// its containers' requests (their limits where they set none).
func PodRequest(t corev1.PodTemplateSpec) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, c := range t.Spec.Containers {
		for name, q := range c.Resources.Limits {
			if _, ok := c.Resources.Requests[name]; !ok {
				add(out, name, q)
			}
		}
		for name, q := range c.Resources.Requests {
			add(out, name, q)
		}
	}
	return out
}

func add(l corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	sum := l[name]
	sum.Add(q)
	l[name] = sum
}

// Room is how many more pods asking perPod fit in the ClusterQueue's
// nominal quota, on the flavor each resource was admitted on (flavors),
// and why not more. A queue where other Workloads wait has none: they
// come first. Borrowing from a cohort is not counted.
func Room(cq *kueue.ClusterQueue, flavors map[corev1.ResourceName]string, perPod corev1.ResourceList) (int, string) {
	if n := cq.Status.PendingWorkloads; n > 0 {
		return 0, fmt.Sprintf("%d Workloads wait in ClusterQueue %s", n, cq.Name)
	}
	room, why := -1, ""
	for name, q := range perPod {
		if q.IsZero() {
			continue
		}
		flavor, ok := flavors[name]
		if !ok {
			continue // not covered by the queue: not counted
		}
		free := nominal(cq, flavor, name)
		free.Sub(reserved(cq, flavor, name))
		n := int(free.MilliValue() / q.MilliValue())
		if free.Sign() <= 0 {
			n = 0
		}
		if room < 0 || n < room {
			room, why = n, fmt.Sprintf("%s of %s free in flavor %s of ClusterQueue %s", free.String(), name, flavor, cq.Name)
		}
	}
	return max(room, 0), why
}

func nominal(cq *kueue.ClusterQueue, flavor string, name corev1.ResourceName) resource.Quantity {
	for _, g := range cq.Spec.ResourceGroups {
		for _, f := range g.Flavors {
			if string(f.Name) != flavor {
				continue
			}
			for _, r := range f.Resources {
				if r.Name == name {
					return r.NominalQuota.DeepCopy()
				}
			}
		}
	}
	return resource.Quantity{}
}

func reserved(cq *kueue.ClusterQueue, flavor string, name corev1.ResourceName) resource.Quantity {
	for _, f := range cq.Status.FlavorsReservation {
		if string(f.Name) != flavor {
			continue
		}
		for _, r := range f.Resources {
			if r.Name == name {
				return r.Total.DeepCopy()
			}
		}
	}
	return resource.Quantity{}
}
