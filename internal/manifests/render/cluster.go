package render

import (
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// MemberUIDAnnotation records, on the cluster's hub ServiceAccount, the UID of the member
// cluster's kube-system namespace: the cluster's identity (as KEP-2149 suggests). It tells a
// re-run of join by the same cluster (resume) from a different cluster reusing the ID (refuse).
const MemberUIDAnnotation = "octopus.io/member-uid"

// clusterLabels are the labels of everything enrolment creates for a cluster on the hub: the
// ownership admission policy keys on the cluster label.
func clusterLabels(clusterID string) map[string]string {
	labels := kube.ManagedLabels()
	labels[v1alpha1.ClusterLabel] = clusterID
	return labels
}

// ClusterServiceAccount renders the hub ServiceAccount of cluster clusterID, whose token is the
// cluster's credential, recording the member cluster's identity memberUID.
func ClusterServiceAccount(namespace, clusterID, memberUID string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Name: v1alpha1.ClusterServiceAccount(clusterID), Namespace: namespace, Labels: clusterLabels(clusterID),
		Annotations: map[string]string{MemberUIDAnnotation: memberUID},
	}}
}

// ClusterTokenLifetime is how long a cluster's hub token lasts: the first one, which join
// requests with the join identity, and each renewal, which the running agent requests with the
// token before (internal/hubaccess). Both admission policies refuse longer ones, so a stolen
// token is useful for at most this long unless its thief also renews it, which revoking the
// cluster (deleting its ServiceAccount) ends. A day lets an agent be down for hours without the
// cluster having to be enrolled again.
const ClusterTokenLifetime = 24 * time.Hour

// ClusterTokenRequest renders the TokenRequest for a token of a cluster's ServiceAccount
// lasting ttl: audience-bound to the hub API server (no audiences means the API server's own)
// and bound to no object, since its lifetime and the ServiceAccount bound it.
func ClusterTokenRequest(ttl time.Duration) *authenticationv1.TokenRequest {
	return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ttl / time.Second))}}
}

// ClusterGrant renders what makes the ServiceAccount sa of cluster clusterID a credential: its
// binding to the Role v1alpha1.ClusterCredentialRole, owned by sa (whose UID must be set) so
// that deleting sa (leave, revocation) garbage-collects it. Once it exists, the join identity
// can no longer request tokens of sa (render.joinPolicy).
func ClusterGrant(namespace, clusterID string, sa *corev1.ServiceAccount) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: sa.Name, Namespace: namespace, Labels: clusterLabels(clusterID),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ServiceAccount", Name: sa.Name, UID: sa.UID}},
		},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: v1alpha1.ClusterCredentialRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: namespace}},
	}
}

// Cluster renders the Cluster object a cluster registers on the hub, labelled with its ID as
// the ownership policy requires.
func Cluster(namespace string, spec v1alpha1.ClusterSpec) *v1alpha1.Cluster {
	return &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: spec.ClusterID, Namespace: namespace, Labels: map[string]string{v1alpha1.ClusterLabel: spec.ClusterID}},
		Spec:       spec,
	}
}
