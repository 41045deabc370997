package render

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// Names of the join identity (the names hub deploy shares with join are in api/v1alpha1).
const (
	// JoinRoleName is the Role of the join identity that broker-info carries.
	JoinRoleName = "octopus-join"
	// JoinServiceAccount is the identity `octopus join` uses to enrol a cluster.
	JoinServiceAccount = "octopus-join"
	// JoinTokenSecret holds the join identity's long-lived token, which hub deploy puts into
	// broker-info.
	JoinTokenSecret = "octopus-join-token"
)

var (
	readWrite = []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	readOnly  = []string{"get", "list", "watch"}
)

// clusterRole is what a joined cluster may do on the hub. It has no access to Secrets: the
// join token lives in one.
func clusterRole(namespace string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.ClusterCredentialRole, Namespace: namespace, Labels: kube.ManagedLabels()},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"octopus.io"}, Resources: []string{"clusters", "peers"}, Verbs: readWrite},
			{APIGroups: []string{"octopus.io"}, Resources: []string{"clusters/status", "peers/status"}, Verbs: []string{"get", "update", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: readWrite},
			// CIDR claims (see internal/cluster): one ConfigMap per allocated block.
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: readWrite},
			// Exported services (internal/servicediscovery): one ServiceImport-shaped record per
			// export and its EndpointSlices. Reading all of them is what importing will need.
			{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceimports"}, Verbs: readWrite},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: readWrite},
			// Its VPC gateways' addresses (issue 33), named <cluster>.<gateway> by the policy.
			{APIGroups: []string{"octopus.io"}, Resources: []string{"gatewayexips"}, Verbs: readWrite},
			// Leaving deletes the cluster's own ServiceAccount, which revokes its tokens; the
			// running agent renews its token before it expires. The ownership policy keeps both
			// to the caller's own ServiceAccount.
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"delete"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
		},
	}
}

// joinRole lets `octopus join` create a cluster's ServiceAccount, request its first token and
// bind it to v1alpha1.ClusterCredentialRole, and read what it needs to detect a duplicate ID.
// It has no access to Secrets and cannot list ServiceAccounts; joinPolicy keeps its token
// requests to ServiceAccounts that are not bound yet, so it cannot obtain an enrolled
// cluster's credential. Whoever holds broker-info can enrol clusters: treat it like a password.
func joinRole(namespace string) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: JoinRoleName, Namespace: namespace, Labels: kube.ManagedLabels()},
		Rules: []rbacv1.PolicyRule{
			// delete: join replaces an account that is not bound yet rather than adopt it
			// (joinPolicy refuses deleting a bound one).
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "create", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"rolebindings"}, Verbs: []string{"get", "create"}},
			// Binding a role needs either all its permissions or "bind" on it.
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles"}, Verbs: []string{"bind"}, ResourceNames: []string{v1alpha1.ClusterCredentialRole}},
			{APIGroups: []string{"octopus.io"}, Resources: []string{"clusters"}, Verbs: readOnly},
		},
	}
}

// hubGatewayIdentity is what the hub's gateway may do: publish its own Peer and its status,
// read the members' Peers and Clusters, and hold its election Lease. It is not a cluster
// credential, so the ownership policy does not confine it; it is confined to the hub
// namespace and to these resources instead, and cannot read Secrets.
func hubGatewayIdentity(namespace string) []client.Object {
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.HubGatewayServiceAccount, Namespace: namespace, Labels: kube.ManagedLabels()}},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.HubGatewayServiceAccount, Namespace: namespace, Labels: kube.ManagedLabels()},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"octopus.io"}, Resources: []string{"peers"}, Verbs: readWrite},
				{APIGroups: []string{"octopus.io"}, Resources: []string{"peers/status"}, Verbs: []string{"get", "update", "patch"}},
				{APIGroups: []string{"octopus.io"}, Resources: []string{"clusters"}, Verbs: readOnly},
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: readWrite},
			},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.HubGatewayServiceAccount, Namespace: namespace, Labels: kube.ManagedLabels()},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: v1alpha1.HubGatewayServiceAccount},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: v1alpha1.HubGatewayServiceAccount, Namespace: namespace}},
		},
	}
}

func joinIdentity(namespace string) []client.Object {
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: JoinServiceAccount, Namespace: namespace, Labels: kube.ManagedLabels()}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: JoinRoleName, Namespace: namespace, Labels: kube.ManagedLabels()},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: JoinRoleName},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: JoinServiceAccount, Namespace: namespace}},
		},
		serviceAccountTokenSecret(namespace, JoinTokenSecret, JoinServiceAccount, kube.ManagedLabels()),
	}
}

// serviceAccountTokenSecret asks kube-controller-manager for a long-lived token of sa: only the
// join identity has one, the token broker-info carries, revoked by deleting the Secret.
// Clusters' tokens are requested with the TokenRequest API and expire (ClusterTokenLifetime).
func serviceAccountTokenSecret(namespace, name, sa string, labels map[string]string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace, Labels: labels,
			Annotations: map[string]string{corev1.ServiceAccountNameKey: sa},
		},
		Type: corev1.SecretTypeServiceAccountToken,
	}
}
