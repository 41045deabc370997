package hub

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// OwnershipPolicyName names the ValidatingAdmissionPolicy (and its binding) that keeps each
// cluster's hub credential to its own objects.
const OwnershipPolicyName = "octopus-cluster-ownership"

// ownershipPolicy builds the admission policy. RBAC grants every cluster the same verbs on the
// hub namespace; this policy narrows them per cluster: a request from the ServiceAccount
// cluster-<id> may create or update only objects labelled octopus.io/cluster=<id>, may update
// or delete only objects that already carry that label, and so can neither touch another
// cluster's objects nor relabel its own. It is CEL evaluated in the API server, so no webhook
// has to be running for the hub to be safe.
func ownershipPolicy(namespace string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	prefix := fmt.Sprintf("system:serviceaccount:%s:%s", namespace, clusterServiceAccountPrefix)
	label := v1alpha1.ClusterLabel
	ownLabel := func(obj string) string {
		return fmt.Sprintf("has(%[1]s.metadata.labels) && %[2]q in %[1]s.metadata.labels && %[1]s.metadata.labels[%[2]q] == variables.clusterID", obj, label)
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: OwnershipPolicyName, Labels: kube.ManagedLabels()},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
						// "*/*" is every resource and every subresource: a cluster must not write another's status either.
						Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "cluster-credential",
				Expression: fmt.Sprintf("request.userInfo.username.startsWith(%q)", prefix),
			}},
			Variables: []admissionregistrationv1.Variable{{
				Name:       "clusterID",
				Expression: fmt.Sprintf("request.userInfo.username.substring(size(%q))", prefix),
			}},
			Validations: []admissionregistrationv1.Validation{
				{
					Expression:        fmt.Sprintf("request.operation == 'DELETE' || (%s)", ownLabel("object")),
					MessageExpression: fmt.Sprintf("'cluster ' + variables.clusterID + ' may only write objects labelled %s=' + variables.clusterID", label),
					Reason:            ptr.To(metav1.StatusReasonForbidden),
				},
				{
					Expression:        fmt.Sprintf("request.operation == 'CREATE' || (%s)", ownLabel("oldObject")),
					MessageExpression: fmt.Sprintf("'cluster ' + variables.clusterID + ' may only change or delete objects labelled %s=' + variables.clusterID", label),
					Reason:            ptr.To(metav1.StatusReasonForbidden),
				},
			},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: OwnershipPolicyName, Labels: kube.ManagedLabels()},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        OwnershipPolicyName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}
