package render

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// ClusterTokenSecretName is the Secret into which kube-controller-manager issues the token of
// cluster clusterID's ServiceAccount.
func ClusterTokenSecretName(clusterID string) string {
	return v1alpha1.ClusterServiceAccount(clusterID) + "-token"
}

// ClusterGrant renders what makes the ServiceAccount sa of cluster clusterID a credential: its
// token Secret and its binding to the Role v1alpha1.ClusterCredentialRole. Both are owned by sa
// (whose UID must be set), so that deleting it (leave) garbage-collects them.
func ClusterGrant(namespace, clusterID string, sa *corev1.ServiceAccount) []client.Object {
	owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ServiceAccount", Name: sa.Name, UID: sa.UID}}
	labels := clusterLabels(clusterID)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: ClusterTokenSecretName(clusterID), Namespace: namespace, Labels: labels, OwnerReferences: owner,
			Annotations: map[string]string{corev1.ServiceAccountNameKey: sa.Name},
		},
		Type: corev1.SecretTypeServiceAccountToken,
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa.Name, Namespace: namespace, Labels: labels, OwnerReferences: owner},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: v1alpha1.ClusterCredentialRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: namespace}},
	}
	return []client.Object{secret, binding}
}

// Cluster renders the Cluster object a cluster registers on the hub, labelled with its ID as
// the ownership policy requires.
func Cluster(namespace string, spec v1alpha1.ClusterSpec) *v1alpha1.Cluster {
	return &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: spec.ClusterID, Namespace: namespace, Labels: map[string]string{v1alpha1.ClusterLabel: spec.ClusterID}},
		Spec:       spec,
	}
}
