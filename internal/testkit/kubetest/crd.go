package kubetest

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/operatorbridge/crds"
)

// ApplyElasticJobCRD creates the ElasticJob CRD and waits until ElasticJobs
// can be listed.
func ApplyElasticJobCRD(ctx context.Context, dyn dynamic.Interface) error {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crds.ElasticJob())
	if err != nil {
		return err
	}
	res := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := res.Create(ctx, &unstructured.Unstructured{Object: raw}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if _, err := dyn.Resource(jobv1.GroupVersionResource).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the ElasticJob CRD was never established")
}
