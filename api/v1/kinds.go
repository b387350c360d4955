package v1

import "k8s.io/apimachinery/pkg/runtime/schema"

// JobKind is a kind of job resource that `coordinator serve --kubernetes`
// runs: its name and its resource.
type JobKind struct {
	Name     string
	Resource schema.GroupVersionResource
}

// APIVersion is the kind's group/version, as objects of it carry it.
func (k JobKind) APIVersion() string { return k.Resource.GroupVersion().String() }

// The job kinds served.
var (
	// ElasticJobs are this package's resource.
	ElasticJobs = JobKind{Name: Kind, Resource: GroupVersionResource}
	// PaddleJobs are paddle-operator's (batch.paddlepaddle.org/v1).
	PaddleJobs = JobKind{Name: "PaddleJob", Resource: schema.GroupVersionResource{Group: "batch.paddlepaddle.org", Version: "v1", Resource: "paddlejobs"}}
	// MSJobs are ms-operator's (mindspore.gitee.com/v1).
	MSJobs = JobKind{Name: "MSJob", Resource: schema.GroupVersionResource{Group: "mindspore.gitee.com", Version: "v1", Resource: "msjobs"}}
)

// JobKinds are every job kind served.
var JobKinds = []JobKind{ElasticJobs, PaddleJobs, MSJobs}

// JobKindNamed finds a job kind by name.
func JobKindNamed(name string) (JobKind, bool) {
	for _, k := range JobKinds {
		if k.Name == name {
			return k, true
		}
	}
	return JobKind{}, false
}
