package operatorbridge

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/membership"
)

func TestDesiredReplicas(t *testing.T) {
	spec := func(np membership.NP, ps int, clean membership.CleanPodPolicy) *membership.Spec {
		s := membership.DefaultSpec(np)
		s.PS, s.CleanPodPolicy = ps, clean
		return &s
	}
	status := func(p membership.JobPhase) *membership.Status { return &membership.Status{Phase: p} }
	none := map[membership.Role]int{membership.RoleWorker: 0, membership.RolePS: 0, membership.RoleScheduler: 0, membership.RoleHeter: 0}
	for _, tc := range []struct {
		name string
		rec  membership.JobRecords
		want map[membership.Role]int
	}{
		{"no spec: hands off", membership.JobRecords{}, nil},
		{"exact np", membership.JobRecords{Spec: spec(membership.NP{Min: 4, Max: 4}, 2, membership.CleanPodNever)},
			map[membership.Role]int{membership.RoleWorker: 4, membership.RolePS: 2, membership.RoleScheduler: 0, membership.RoleHeter: 0}},
		{"a range asks for its maximum", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 8}, 0, membership.CleanPodNever), Status: status(membership.JobRunning)},
			map[membership.Role]int{membership.RoleWorker: 8, membership.RolePS: 0, membership.RoleScheduler: 0, membership.RoleHeter: 0}},
		{"Never keeps the pods", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodNever), Status: status(membership.JobSucceeded)}, nil},
		{"Always removes them", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodAlways), Status: status(membership.JobFailed)}, none},
		{"OnCompletion after success", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodOnCompletion), Status: status(membership.JobSucceeded)}, none},
		{"OnCompletion keeps a failed job's pods", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodOnCompletion), Status: status(membership.JobFailed)}, nil},
		{"OnFailure after failure", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodOnFailure), Status: status(membership.JobFailed)}, none},
		{"OnFailure keeps a succeeded job's pods", membership.JobRecords{Spec: spec(membership.NP{Min: 2, Max: 2}, 0, membership.CleanPodOnFailure), Status: status(membership.JobSucceeded)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, desiredReplicas(tc.rec))
		})
	}
}
