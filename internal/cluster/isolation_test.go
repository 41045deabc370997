package cluster

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/render"
)

// policyDenied is the message of the ownership policy; rbacDenied that of RBAC. Each case says
// which layer must stop it, so that removing either layer makes a case fail.
const (
	policyDenied = "may only"
	rbacDenied   = "cannot"
)

func TestClusterCredentialIsConfinedToOwnObjects(t *testing.T) {
	f := newFabric(t, "east", "west")
	east, west := f.join(t, "east"), f.join(t, "west")
	ns := f.info.Namespace
	asEast, asWest := f.as(t, east), f.as(t, west)
	if err := asWest.Create(t.Context(), testPeer(ns, "west")); err != nil {
		t.Fatalf("west creating its own Peer: %v", err)
	}

	get := func(c client.Client, obj client.Object, name string) client.Object {
		t.Helper()
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			t.Fatal(err)
		}
		return obj
	}
	tests := []struct {
		name  string
		layer string
		do    func() error
	}{
		{"update another cluster's Cluster", policyDenied, func() error {
			cl := get(asEast, &v1alpha1.Cluster{}, "west").(*v1alpha1.Cluster)
			cl.Spec.PodCIDRs = []string{"10.99.0.0/16"}
			return asEast.Update(t.Context(), cl)
		}},
		{"update another cluster's Cluster status", policyDenied, func() error {
			cl := get(asEast, &v1alpha1.Cluster{}, "west").(*v1alpha1.Cluster)
			meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: "AgentConnected", Status: "False", Reason: "Forged"})
			return asEast.Status().Update(t.Context(), cl)
		}},
		{"delete another cluster's Cluster", policyDenied, func() error {
			return asEast.Delete(t.Context(), &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "west"}})
		}},
		{"relabel another cluster's Cluster as own", policyDenied, func() error {
			cl := get(asEast, &v1alpha1.Cluster{}, "west").(*v1alpha1.Cluster)
			cl.Labels[v1alpha1.ClusterLabel] = "east"
			return asEast.Update(t.Context(), cl)
		}},
		{"relabel own Cluster as another's", policyDenied, func() error {
			cl := get(asEast, &v1alpha1.Cluster{}, "east").(*v1alpha1.Cluster)
			cl.Labels[v1alpha1.ClusterLabel] = "west"
			return asEast.Update(t.Context(), cl)
		}},
		{"remove the label from own Cluster", policyDenied, func() error {
			cl := get(asEast, &v1alpha1.Cluster{}, "east").(*v1alpha1.Cluster)
			delete(cl.Labels, v1alpha1.ClusterLabel)
			return asEast.Update(t.Context(), cl)
		}},
		{"create a Peer labelled as another cluster", policyDenied, func() error {
			p := testPeer(ns, "forged")
			p.Labels[v1alpha1.ClusterLabel] = "west"
			return asEast.Create(t.Context(), p)
		}},
		{"create an unlabelled Peer", policyDenied, func() error {
			p := testPeer(ns, "unlabelled")
			p.Labels = nil
			return asEast.Create(t.Context(), p)
		}},
		{"update another cluster's Peer", policyDenied, func() error {
			p := get(asEast, &v1alpha1.Peer{}, "west").(*v1alpha1.Peer)
			p.Spec.Endpoint.PrivateIP = "198.51.100.9"
			return asEast.Update(t.Context(), p)
		}},
		{"delete another cluster's Peer", policyDenied, func() error {
			return asEast.Delete(t.Context(), &v1alpha1.Peer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "west"}})
		}},
		{"delete another cluster's ServiceAccount", policyDenied, func() error {
			return asEast.Delete(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.ClusterServiceAccount("west")}})
		}},
		{"squat the Cluster of a cluster that has not joined", policyDenied, func() error {
			return asEast.Create(t.Context(), &v1alpha1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "north", Labels: map[string]string{v1alpha1.ClusterLabel: "east"}},
				Spec:       v1alpha1.ClusterSpec{ClusterID: "north", PodCIDRs: []string{"10.77.0.0/16"}, ServiceCIDRs: []string{"10.78.0.0/16"}},
			})
		}},
		{"squat the heartbeat Lease of another cluster", policyDenied, func() error {
			return asEast.Create(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "north", Labels: map[string]string{v1alpha1.ClusterLabel: "east"}}})
		}},
		{"publish a Peer for another cluster under its own label", policyDenied, func() error {
			p := testPeer(ns, "east-forged")
			p.Labels[v1alpha1.ClusterLabel] = "east"
			p.Spec.ClusterID = "west"
			return asEast.Create(t.Context(), p)
		}},
		{"read another cluster's token", rbacDenied, func() error {
			return asEast.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: render.ClusterTokenSecretName("west")}, &corev1.Secret{})
		}},
		{"grant itself more access", rbacDenied, func() error {
			return asEast.Create(t.Context(), &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "escalate", Labels: map[string]string{v1alpha1.ClusterLabel: "east"}},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: render.JoinRoleName},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: v1alpha1.ClusterServiceAccount("east"), Namespace: ns}},
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			if !apierrors.IsForbidden(err) {
				t.Fatalf("err = %v, want Forbidden", err)
			}
			if !strings.Contains(err.Error(), tt.layer) {
				t.Errorf("err = %v\nwant it denied by the layer whose message contains %q", err, tt.layer)
			}
		})
	}

	// Positive controls: the same credential can manage its own objects.
	if err := asEast.Create(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "east", Labels: map[string]string{v1alpha1.ClusterLabel: "east"}}}); err != nil {
		t.Fatalf("east creating its own heartbeat Lease: %v", err)
	}
	own := testPeer(ns, "east")
	if err := asEast.Create(t.Context(), own); err != nil {
		t.Fatalf("east creating its own Peer: %v", err)
	}
	own.Spec.Endpoint.Port = 4501
	if err := asEast.Update(t.Context(), own); err != nil {
		t.Fatalf("east updating its own Peer: %v", err)
	}
	if err := asEast.Delete(t.Context(), own); err != nil {
		t.Fatalf("east deleting its own Peer: %v", err)
	}

	// The policy is what stops the cross-cluster writes: without its binding, the very same
	// request goes through. This guards the tests above against passing for another reason.
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: render.OwnershipPolicyName}}
	if err := f.hub.Delete(t.Context(), binding); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "cross-cluster delete to be admitted without the policy", func() bool {
		err := asEast.Delete(t.Context(), &v1alpha1.Peer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "west"}})
		return err == nil
	})
}

// TestJoinCredentialIsConfinedToEnrolment: broker-info's join identity can enrol clusters but
// cannot bind the cluster Role to arbitrary subjects (itself included) or create other objects.
func TestJoinCredentialIsConfinedToEnrolment(t *testing.T) {
	f := newFabric(t, "east")
	f.join(t, "east")
	ns := f.info.Namespace
	asJoin := newClient(t, &rest.Config{Host: f.info.HubURL, BearerToken: f.info.JoinToken, TLSClientConfig: rest.TLSClientConfig{CAData: f.info.CAData}})
	binding := func(name, subject string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: v1alpha1.ClusterCredentialRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: subject, Namespace: ns}},
		}
	}
	tests := []struct {
		name string
		obj  client.Object
	}{
		{"bind the cluster Role to the join identity", binding("cluster-x", render.JoinServiceAccount)},
		{"bind the cluster Role under another name", binding("sneaky", "sneaky")},
		{"bind the cluster Role to another cluster's account", binding("cluster-x", v1alpha1.ClusterServiceAccount("east"))},
		{"create a ServiceAccount that is not a cluster's", &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sneaky"}}},
		{"create a cluster ServiceAccount labelled as another", &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-x", Labels: map[string]string{v1alpha1.ClusterLabel: "east"}}}},
		{"enrol the cluster ID reserved for the hub's gateway", &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.ClusterServiceAccount(v1alpha1.HubPeerName),
			Labels: map[string]string{v1alpha1.ClusterLabel: v1alpha1.HubPeerName}}}},
		{"create an ordinary Secret", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sneaky"}, StringData: map[string]string{"a": "b"}}},
		{"mint a second token for a cluster", &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "east-token-2", Annotations: map[string]string{corev1.ServiceAccountNameKey: v1alpha1.ClusterServiceAccount("east")}},
			Type:       corev1.SecretTypeServiceAccountToken,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := asJoin.Create(t.Context(), tt.obj)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "the join identity may only") {
				t.Fatalf("err = %v, want Forbidden by the join policy", err)
			}
		})
	}
}
