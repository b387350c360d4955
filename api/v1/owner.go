package v1

import (
	"slices"
	"strings"
)

// Owner is the resource that a job is run for, as the job's etcd spec names
// it (membership.Spec.Owner): Kind/namespace/name/uid. Everything made for
// the job is owned by that resource.
type Owner struct {
	Kind, Namespace, Name, UID string
}

// String is the owner as a spec names it: Kind/namespace/name/uid.
func (o Owner) String() string {
	return o.Kind + "/" + o.Namespace + "/" + o.Name + "/" + o.UID
}

// ParseOwner takes apart a spec's owner, Kind/namespace/name/uid; false if
// it is not one, or a part is empty.
func ParseOwner(s string) (Owner, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 || slices.Contains(parts, "") {
		return Owner{}, false
	}
	return Owner{Kind: parts[0], Namespace: parts[1], Name: parts[2], UID: parts[3]}, true
}
