package kube

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// FieldManager is the server-side apply field manager of every object Octopus applies.
const FieldManager = "octopus"

// Apply server-side-applies typed objects in order. Applying an unchanged object is a no-op on
// the server (its resourceVersion stays), which is what makes deploy and join idempotent.
func Apply(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, obj := range objs {
		u, err := toUnstructured(obj, c.Scheme())
		if err != nil {
			return err
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", u.GetKind(), client.ObjectKeyFromObject(obj), err)
		}
	}
	return nil
}

func toUnstructured(obj client.Object, scheme *runtime.Scheme) (*unstructured.Unstructured, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return nil, fmt.Errorf("finding the kind of %T: %w", obj, err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	// Server-side apply must not carry server-owned fields.
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	return u, nil
}

// ManagedByLabel marks objects Octopus created in a cluster, so that cleanup never deletes
// something it did not make.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// ManagedLabels returns a fresh label map with ManagedByLabel set.
func ManagedLabels() map[string]string { return map[string]string{ManagedByLabel: FieldManager} }
