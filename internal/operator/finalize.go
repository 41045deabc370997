package operator

import (
	"context"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

// finalize undoes what the Fabric did; done tells that the finalizer may go.
func (r *Reconciler) finalize(ctx context.Context, f *v1alpha1.Fabric, st *v1alpha1.FabricStatus) (bool, error) {
	if f.Spec.CloudPrepareConfig != nil {
		if err := r.unprepare(ctx); err != nil {
			return false, err
		}
	}
	switch {
	case f.Spec.HubConfig != nil:
		return true, r.finalizeHub(ctx, f)
	case f.Spec.JoinConfig != nil:
		return r.finalizeMember(ctx, f, st)
	}
	return true, nil
}
