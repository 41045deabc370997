package render

import (
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// HubOptions configure Hub.
type HubOptions struct {
	// Namespace holds the hub's shared state. Optional: v1alpha1.DefaultHubNamespace.
	Namespace string
}

// HubObjects are the objects that make an API server the hub, in three groups because they
// are applied in this order, each group once the one before is served.
type HubObjects struct {
	Namespace *corev1.Namespace
	// CRDs are the kinds clusters publish on the hub (crd.Hub).
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// Objects are the admission policies, then the RBAC and the identities they confine
	// (the join identity, its token Secret, the hub gateway's): the policies first, so that
	// no identity ever exists unconfined.
	Objects []client.Object
}

// All returns every object, in the order to apply them.
func (h *HubObjects) All() []client.Object {
	out := []client.Object{h.Namespace}
	for _, c := range h.CRDs {
		out = append(out, c)
	}
	return append(out, h.Objects...)
}

// Hub renders the hub's objects.
func Hub(o HubOptions) (*HubObjects, error) {
	ns := o.Namespace
	if ns == "" {
		ns = v1alpha1.DefaultHubNamespace
	}
	crds, err := crd.Hub()
	if err != nil {
		return nil, err
	}
	ownership, ownershipBinding := ownershipPolicy(ns)
	join, joinBinding := joinPolicy(ns)
	objs := []client.Object{ownership, ownershipBinding, join, joinBinding, clusterRole(ns), joinRole(ns)}
	objs = append(objs, joinIdentity(ns)...)
	objs = append(objs, hubGatewayIdentity(ns)...)
	return &HubObjects{
		Namespace: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: kube.ManagedLabels()}},
		CRDs:      crds,
		Objects:   objs,
	}, nil
}
