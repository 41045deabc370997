package cluster

import (
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hub"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
	"github.com/octopus-mcs/octopus/internal/manifests/render"
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
	if err := asWest.Create(t.Context(), testGatewayExIP(ns, "west", "red", "west")); err != nil {
		t.Fatalf("west publishing its own VPC gateway's GatewayExIp: %v", err)
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
			p := testPeer(ns, "north")
			p.Labels[v1alpha1.ClusterLabel] = "east"
			return asEast.Create(t.Context(), p)
		}},
		{"publish an EndpointSlice under another cluster's source-cluster", policyDenied, func() error {
			return asEast.Create(t.Context(), &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged-slice", Labels: map[string]string{
					v1alpha1.ClusterLabel: "east", mcsv1beta1.LabelSourceCluster: "west", mcsv1beta1.LabelServiceName: "api", v1alpha1.ServiceNamespaceLabel: "web"}},
				AddressType: discoveryv1.AddressTypeIPv4,
			})
		}},
		{"publish an EndpointSlice without a source-cluster", policyDenied, func() error {
			return asEast.Create(t.Context(), &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "anonymous-slice", Labels: map[string]string{v1alpha1.ClusterLabel: "east"}},
				AddressType: discoveryv1.AddressTypeIPv4,
			})
		}},
		{"publish a service record under another cluster's source-cluster", policyDenied, func() error {
			return asEast.Create(t.Context(), &mcsv1beta1.ServiceImport{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged-record", Labels: map[string]string{
					v1alpha1.ClusterLabel: "east", mcsv1beta1.LabelSourceCluster: "west", mcsv1beta1.LabelServiceName: "api", v1alpha1.ServiceNamespaceLabel: "web"}},
				Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
			})
		}},
		{"publish a GatewayExIp named for another cluster under its own label", policyDenied, func() error {
			return asEast.Create(t.Context(), testGatewayExIP(ns, "west", "red", "east"))
		}},
		{"publish a GatewayExIp under the members' ambiguous name", policyDenied, func() error {
			return asEast.Create(t.Context(), testGatewayExIP(ns, "", "red-east", "east"))
		}},
		{"update another cluster's GatewayExIp", policyDenied, func() error {
			g := get(asEast, &v1alpha1.GatewayExIp{}, v1alpha1.GatewayExIpHubName("west", "red")).(*v1alpha1.GatewayExIp)
			g.Spec.ExternalIP = "198.51.100.66"
			return asEast.Update(t.Context(), g)
		}},
		{"delete another cluster's GatewayExIp", policyDenied, func() error {
			return asEast.Delete(t.Context(), testGatewayExIP(ns, "west", "red", "west"))
		}},
		{"read the join token", rbacDenied, func() error {
			return asEast.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: render.JoinTokenSecret}, &corev1.Secret{})
		}},
		{"request a token of another cluster", policyDenied, func() error {
			return requestToken(t, asEast, ns, v1alpha1.ClusterServiceAccount("west"), render.ClusterTokenLifetime)
		}},
		{"request a token of the join identity", policyDenied, func() error {
			return requestToken(t, asEast, ns, render.JoinServiceAccount, render.ClusterTokenLifetime)
		}},
		{"request a token of the hub gateway", policyDenied, func() error {
			return requestToken(t, asEast, ns, v1alpha1.HubGatewayServiceAccount, render.ClusterTokenLifetime)
		}},
		{"request a token of its own that outlives a fresh one", policyDenied, func() error {
			return requestToken(t, asEast, ns, v1alpha1.ClusterServiceAccount("east"), 2*render.ClusterTokenLifetime)
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

	// Positive controls: the same credential can renew itself and manage its own objects.
	if err := requestToken(t, asEast, ns, v1alpha1.ClusterServiceAccount("east"), render.ClusterTokenLifetime); err != nil {
		t.Fatalf("east renewing its own token: %v", err)
	}
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
	gw := testGatewayExIP(ns, "east", "red", "east")
	if err := asEast.Create(t.Context(), gw); err != nil {
		t.Fatalf("east publishing its own GatewayExIp: %v", err)
	}
	gw.Spec.ExternalIP = "198.51.100.20" // a gateway failover moves it
	if err := asEast.Update(t.Context(), gw); err != nil {
		t.Fatalf("east updating its own GatewayExIp: %v", err)
	}
	if err := asEast.Delete(t.Context(), gw); err != nil {
		t.Fatalf("east deleting its own GatewayExIp: %v", err)
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
// cannot obtain an enrolled cluster's credential (read it, request a token of its
// ServiceAccount, bind itself or another account to the cluster Role) or create other objects.
func TestJoinCredentialIsConfinedToEnrolment(t *testing.T) {
	f := newFabric(t, "east")
	east := f.join(t, "east")
	ns := f.info.Namespace
	asJoin := newClient(t, &rest.Config{Host: f.info.HubURL, BearerToken: f.info.JoinToken, TLSClientConfig: rest.TLSClientConfig{CAData: f.info.CAData}})
	const joinDenied = "the join identity may only"
	binding := func(name, subject string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: v1alpha1.ClusterCredentialRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: subject, Namespace: ns}},
		}
	}
	create := func(obj client.Object) func() error {
		return func() error { return asJoin.Create(t.Context(), obj) }
	}
	eastSA := v1alpha1.ClusterServiceAccount("east")
	tests := []struct {
		name  string
		layer string
		do    func() error
	}{
		{"request a token of an enrolled cluster", joinDenied, func() error {
			return requestToken(t, asJoin, ns, eastSA, render.ClusterTokenLifetime)
		}},
		{"request a token of the join identity", joinDenied, func() error {
			return requestToken(t, asJoin, ns, render.JoinServiceAccount, render.ClusterTokenLifetime)
		}},
		{"request a token of the hub gateway", joinDenied, func() error {
			return requestToken(t, asJoin, ns, v1alpha1.HubGatewayServiceAccount, render.ClusterTokenLifetime)
		}},
		{"read a Secret of the hub", rbacDenied, func() error {
			return asJoin.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: render.JoinTokenSecret}, &corev1.Secret{})
		}},
		{"list the ServiceAccounts of the hub", rbacDenied, func() error {
			return asJoin.List(t.Context(), &corev1.ServiceAccountList{}, client.InNamespace(ns))
		}},
		{"delete an enrolled cluster's ServiceAccount", joinDenied, func() error {
			return asJoin.Delete(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: eastSA}})
		}},
		// The flow this model replaced: a Secret from which kube-controller-manager would
		// issue a never-expiring token of the cluster's ServiceAccount.
		{"create a token Secret for an enrolled cluster", rbacDenied, create(&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "east-token-2", Annotations: map[string]string{corev1.ServiceAccountNameKey: eastSA}},
			Type:       corev1.SecretTypeServiceAccountToken,
		})},
		{"bind the cluster Role to the join identity", joinDenied, create(binding("cluster-x", render.JoinServiceAccount))},
		{"bind the cluster Role under another name", joinDenied, create(binding("sneaky", "sneaky"))},
		{"bind the cluster Role to another cluster's account", joinDenied, create(binding("cluster-x", eastSA))},
		{"create a ServiceAccount that is not a cluster's", joinDenied, create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sneaky"}})},
		{"create a cluster ServiceAccount labelled as another", joinDenied, create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-x", Labels: map[string]string{v1alpha1.ClusterLabel: "east"}}})},
		{"enrol the cluster ID of the hub gateway's election Lease", joinDenied, create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.ClusterServiceAccount(v1alpha1.HubGatewayLeaseName),
			Labels: map[string]string{v1alpha1.ClusterLabel: v1alpha1.HubGatewayLeaseName}}})},
		{"enrol the cluster ID reserved for the hub's gateway", joinDenied, create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.ClusterServiceAccount(v1alpha1.HubPeerName),
			Labels: map[string]string{v1alpha1.ClusterLabel: v1alpha1.HubPeerName}}})},
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

	t.Run("a new cluster's first token is bounded", func(t *testing.T) {
		fresh := render.ClusterServiceAccount(ns, "north", "uid-north")
		if err := asJoin.Create(t.Context(), fresh); err != nil {
			t.Fatal(err)
		}
		err := requestToken(t, asJoin, ns, fresh.Name, 2*render.ClusterTokenLifetime)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), joinDenied) {
			t.Fatalf("an over-long first token: err = %v, want Forbidden by the join policy", err)
		}
		if err := requestToken(t, asJoin, ns, fresh.Name, render.ClusterTokenLifetime); err != nil {
			t.Fatalf("the first token of a cluster that is not enrolled yet: %v", err)
		}
	})

	// No cluster credential is a Secret: the only token Secret on the hub is the join identity's.
	secrets := &corev1.SecretList{}
	if err := f.hub.List(t.Context(), secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if s.Type == corev1.SecretTypeServiceAccountToken && s.Name != render.JoinTokenSecret {
			t.Errorf("token Secret %s (for %s) on the hub: cluster credentials must be requested, expiring tokens", s.Name, s.Annotations[corev1.ServiceAccountNameKey])
		}
	}
	issued, expires, err := hubaccess.TokenTimes(east.Credential.Token)
	if err != nil || expires.IsZero() || expires.Sub(issued) > render.ClusterTokenLifetime {
		t.Errorf("east's credential: issued %s, expires %s, %v; want a token expiring within %s", issued, expires, err, render.ClusterTokenLifetime)
	}

	// The join policy is what refuses the enrolled cluster's token: without its binding, the
	// very same request is granted.
	if err := f.hub.Delete(t.Context(), &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: render.JoinPolicyName}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the join identity to obtain east's token without the join policy", func() bool {
		return requestToken(t, asJoin, ns, eastSA, render.ClusterTokenLifetime) == nil
	})
}

// requestToken asks the hub, as c, for a token of ServiceAccount sa lasting ttl.
func requestToken(t testing.TB, c client.Client, namespace, sa string, ttl time.Duration) error {
	t.Helper()
	return c.SubResource("token").Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: sa}}, render.ClusterTokenRequest(ttl))
}

// TestRejoinDoesNotAdoptPrecreatedAccount: after a revoke, a broker-info holder pre-creates
// the revoked cluster's account with the cluster's member-uid (which broker-info can read) and
// takes its first token. When the cluster joins again, the account is replaced, not adopted:
// the attacker's token is worthless and the cluster's new credential works.
func TestRejoinDoesNotAdoptPrecreatedAccount(t *testing.T) {
	f := newFabric(t, "east")
	east := f.join(t, "east")
	ns := f.info.Namespace
	asJoin := newClient(t, &rest.Config{Host: f.info.HubURL, BearerToken: f.info.JoinToken, TLSClientConfig: rest.TLSClientConfig{CAData: f.info.CAData}})
	victim := &corev1.ServiceAccount{}
	if err := asJoin.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: v1alpha1.ClusterServiceAccount("east")}, victim); err != nil {
		t.Fatal(err)
	}
	uid := victim.Annotations[render.MemberUIDAnnotation]
	// The join identity may delete only accounts no RoleBinding binds yet: an enrolled
	// cluster's credential is not broker-info's to replace.
	if err := asJoin.Delete(t.Context(), victim); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "already enrolled") {
		t.Fatalf("the join identity deleting enrolled east's ServiceAccount: %v, want it refused by the hub's policy", err)
	}
	if err := hub.Revoke(t.Context(), f.hub, ns, "east"); err != nil {
		t.Fatal(err)
	}
	var stolen string
	waitFor(t, "the attacker to pre-create east's account and take its first token", func() bool {
		sa := render.ClusterServiceAccount(ns, "east", uid)
		if err := asJoin.Create(t.Context(), sa); err != nil && !apierrors.IsAlreadyExists(err) {
			return false
		}
		tr := render.ClusterTokenRequest(render.ClusterTokenLifetime)
		if err := asJoin.SubResource("token").Create(t.Context(), sa, tr); err != nil {
			return false
		}
		stolen = tr.Status.Token
		return true
	})
	again := f.join(t, "east")
	if again.Credential.Token == east.Credential.Token {
		t.Fatal("re-joining returned the revoked token")
	}
	if err := f.as(t, again).List(t.Context(), &v1alpha1.ClusterList{}, client.InNamespace(ns)); err != nil {
		t.Errorf("east after re-joining: %v", err)
	}
	asAttacker := newClient(t, &rest.Config{Host: f.info.HubURL, BearerToken: stolen, TLSClientConfig: rest.TLSClientConfig{CAData: f.info.CAData}})
	waitFor(t, "the hub to refuse the attacker's token of the replaced account", func() bool {
		err := asAttacker.List(t.Context(), &v1alpha1.ClusterList{}, client.InNamespace(ns))
		return apierrors.IsUnauthorized(err)
	})
}

// testGatewayExIP is a VPC gateway's GatewayExIp on the hub, named for cluster (the hub's
// <cluster>.<gateway>; cluster "" names it gateway alone) and labelled owner.
func testGatewayExIP(ns, cluster, gateway, owner string) *v1alpha1.GatewayExIp {
	name := gateway
	if cluster != "" {
		name = v1alpha1.GatewayExIpHubName(cluster, gateway)
	}
	return &v1alpha1.GatewayExIp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{v1alpha1.ClusterLabel: owner}},
		Spec:       v1alpha1.GatewayExIPSpec{ExternalIP: "198.51.100.10", GlobalnetCIDR: "242.1.0.0/16"},
	}
}
