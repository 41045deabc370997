package render

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1alpha1 "github.com/octopus-mcs/octopus/api/about/v1alpha1"
	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// MemberOptions configure Member.
type MemberOptions struct {
	// Credential is the cluster's hub credential; its ClusterID names the cluster. Required.
	Credential hubaccess.Credential
	// DNSImage is the octopus-dns image. Required.
	DNSImage string
}

// MemberObjects are the objects a joined member cluster holds, in three groups because they
// are applied in this order.
type MemberObjects struct {
	// CRDs are Octopus's member CRDs (crd.Member), which leave removes, then the
	// Multi-Cluster Services CRDs (crd.MCS), which it keeps: they hold the users'
	// ServiceExports, and services can be exported as soon as the cluster has joined.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// Objects are the namespace v1alpha1.SystemNamespace, the credential Secret the
	// components read, and the ClusterProperty naming the cluster (KEP-2149).
	Objects []client.Object
	// DNS is octopus-dns (see DNS).
	DNS []client.Object
}

// All returns every object, in the order to apply them.
func (m *MemberObjects) All() []client.Object {
	var out []client.Object
	for _, c := range m.CRDs {
		out = append(out, c)
	}
	out = append(out, m.Objects...)
	return append(out, m.DNS...)
}

// Member renders the objects of a member cluster joined with o.Credential.
func Member(o MemberOptions) (*MemberObjects, error) {
	if o.Credential.ClusterID == "" || o.DNSImage == "" {
		return nil, errors.New("rendering a member cluster: the credential's cluster ID and the octopus-dns image are required")
	}
	crds, err := crd.Member()
	if err != nil {
		return nil, err
	}
	mcs, err := crd.MCS()
	if err != nil {
		return nil, err
	}
	dns, err := DNS(o.DNSImage)
	if err != nil {
		return nil, err
	}
	return &MemberObjects{
		CRDs: append(crds, mcs...),
		Objects: []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace, Labels: kube.ManagedLabels()}},
			o.Credential.Secret(),
			&aboutv1alpha1.ClusterProperty{
				ObjectMeta: metav1.ObjectMeta{Name: aboutv1alpha1.ClusterIDProperty},
				Spec:       aboutv1alpha1.ClusterPropertySpec{Value: o.Credential.ClusterID},
			},
		},
		DNS: dns,
	}, nil
}
