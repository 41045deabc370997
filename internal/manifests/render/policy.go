package render

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
)

// Names of the ValidatingAdmissionPolicies (each with a binding of the same name).
const (
	// OwnershipPolicyName keeps each cluster's hub credential to its own objects.
	OwnershipPolicyName = "octopus-cluster-ownership"
	// JoinPolicyName keeps the join identity to creating enrolment objects of the expected shape.
	JoinPolicyName = "octopus-join-enrolment"
)

// identityRule ties a kind of hub object to the cluster that may write it, beyond the label:
// without it a cluster could create, labelled as itself, the Cluster or heartbeat Lease named
// after a cluster that has not joined yet and so lock that cluster out.
type identityRule struct {
	group, resource string
	// field is the CEL expression on object that must equal the caller's cluster ID.
	field string
}

var identityRules = []identityRule{
	{group: "octopus.io", resource: "clusters", field: "object.metadata.name"},
	{group: "octopus.io", resource: "peers", field: "object.spec.clusterID"},
	// The CRD ties a Peer's name to its clusterID; this holds even where the CRD is older:
	// a cluster must not squat the Peer name of one that has not joined yet.
	{group: "octopus.io", resource: "peers", field: "object.metadata.name"},
	{group: "coordination.k8s.io", resource: "leases", field: "object.metadata.name"},
}

// tokenRequest is true for a TokenRequest (create on serviceaccounts/token): request.name is
// the ServiceAccount, object the TokenRequest.
const tokenRequest = `request.resource.group == "" && request.resource.resource == "serviceaccounts" && ` + subResource + ` == "token"`

// subResource is the request's subresource, "" for the resource itself (CEL has no field for
// an empty one).
const subResource = `(has(request.subResource) ? request.subResource : "")`

// tokenShape is what every token request for a cluster must look like: no longer-lived than
// ClusterTokenLifetime. (Binding it to an object is allowed: that only shortens its life.)
func tokenShape() string {
	return fmt.Sprintf("has(object.spec.expirationSeconds) && object.spec.expirationSeconds <= %d", int64(ClusterTokenLifetime/time.Second))
}

// ownershipPolicy builds the cluster policy. RBAC grants every cluster the same verbs on the
// hub namespace; this policy narrows them per cluster: a request from the ServiceAccount
// cluster-<id> may create or update only objects labelled octopus.io/cluster=<id>, may update
// or delete only objects that already carry that label, and so can neither touch another
// cluster's objects nor relabel its own. Objects that name a cluster (identityRules) must name
// the caller. It is CEL evaluated in the API server: no webhook has to run for the hub to be safe.
func ownershipPolicy(namespace string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	prefix := fmt.Sprintf("system:serviceaccount:%s:%s", namespace, v1alpha1.ClusterServiceAccountPrefix)
	label := v1alpha1.ClusterLabel
	ownLabel := func(obj string) string {
		return fmt.Sprintf("has(%[1]s.metadata.labels) && %[2]q in %[1]s.metadata.labels && %[1]s.metadata.labels[%[2]q] == variables.clusterID", obj, label)
	}
	validations := []admissionregistrationv1.Validation{
		{
			// A TokenRequest carries no labels; the rule below confines it instead.
			Expression:        fmt.Sprintf("request.operation == 'DELETE' || variables.tokenRequest || (%s)", ownLabel("object")),
			MessageExpression: fmt.Sprintf("'cluster ' + variables.clusterID + ' may only write objects labelled %s=' + variables.clusterID", label),
			Reason:            ptr.To(metav1.StatusReasonForbidden),
		},
		{
			Expression:        fmt.Sprintf("request.operation == 'CREATE' || (%s)", ownLabel("oldObject")),
			MessageExpression: fmt.Sprintf("'cluster ' + variables.clusterID + ' may only change or delete objects labelled %s=' + variables.clusterID", label),
			Reason:            ptr.To(metav1.StatusReasonForbidden),
		},
	}
	for _, r := range identityRules {
		validations = append(validations, admissionregistrationv1.Validation{
			Expression: fmt.Sprintf("request.operation == 'DELETE' || request.resource.group != %q || request.resource.resource != %q || %s == variables.clusterID",
				r.group, r.resource, r.field),
			MessageExpression: fmt.Sprintf("'cluster ' + variables.clusterID + ' may only write %s whose %s is ' + variables.clusterID", r.resource, r.field),
			Reason:            ptr.To(metav1.StatusReasonForbidden),
		})
	}
	// The importers attribute a service's records and slices to the cluster their MCS
	// source-cluster label names: a cluster may publish them only under its own name.
	sourceCluster := "multicluster.kubernetes.io/source-cluster"
	validations = append(validations, admissionregistrationv1.Validation{
		Expression:        fmt.Sprintf(`request.operation == 'DELETE' || !((request.resource.group == "discovery.k8s.io" && request.resource.resource == "endpointslices") || (request.resource.group == "multicluster.x-k8s.io" && request.resource.resource == "serviceimports")) || (has(object.metadata.labels) && %[1]q in object.metadata.labels && object.metadata.labels[%[1]q] == variables.clusterID)`, sourceCluster),
		MessageExpression: fmt.Sprintf("'cluster ' + variables.clusterID + ' may only publish EndpointSlices and ServiceImports labelled %s=' + variables.clusterID", sourceCluster),
		Reason:            ptr.To(metav1.StatusReasonForbidden),
	})
	// A GatewayExIp on the hub is named <cluster>.<gateway> (v1alpha1.GatewayExIpHubName):
	// a cluster publishes only its own gateways' addresses, and cannot take the name of
	// another's, which the members' <gateway>-<cluster> could not promise.
	validations = append(validations, admissionregistrationv1.Validation{
		Expression:        `request.operation == 'DELETE' || request.resource.group != "octopus.io" || request.resource.resource != "gatewayexips" || object.metadata.name.startsWith(variables.clusterID + ".")`,
		MessageExpression: "'cluster ' + variables.clusterID + ' may only write gatewayexips named ' + variables.clusterID + '.<gateway>'",
		Reason:            ptr.To(metav1.StatusReasonForbidden),
	})
	// Renewal: a cluster may request tokens only of its own ServiceAccount (not of another
	// cluster's, the join identity's or the hub gateway's), no longer-lived than a fresh one.
	validations = append(validations, admissionregistrationv1.Validation{
		Expression: fmt.Sprintf("!variables.tokenRequest || (request.name == %q + variables.clusterID && %s)",
			v1alpha1.ClusterServiceAccountPrefix, tokenShape()),
		MessageExpression: fmt.Sprintf("'cluster ' + variables.clusterID + ' may only request tokens of its own ServiceAccount %s' + variables.clusterID + ', lasting at most %ds'",
			v1alpha1.ClusterServiceAccountPrefix, int64(ClusterTokenLifetime/time.Second)),
		Reason: ptr.To(metav1.StatusReasonForbidden),
	})
	// The hub gateway's Peer carries the label of HubPeerName, a cluster ID join refuses; this
	// keeps a cluster from publishing a hub-role Peer of its own, or turning its Peer into one,
	// which would make the members route through it.
	notHub := func(obj string) string {
		return fmt.Sprintf("!has(%[1]s.spec.role) || %[1]s.spec.role != %q", obj, v1alpha1.PeerRoleHub)
	}
	validations = append(validations, admissionregistrationv1.Validation{
		Expression: fmt.Sprintf(`request.resource.group != "octopus.io" || request.resource.resource != "peers" || ((request.operation == 'DELETE' || %s) && (request.operation == 'CREATE' || %s))`,
			notHub("object"), notHub("oldObject")),
		MessageExpression: fmt.Sprintf("'cluster ' + variables.clusterID + ' may not write Peers of role %s: only the hub gateway publishes one'", v1alpha1.PeerRoleHub),
		Reason:            ptr.To(metav1.StatusReasonForbidden),
	})
	return policyAndBinding(OwnershipPolicyName, namespace,
		admissionregistrationv1.MatchCondition{Name: "cluster-credential", Expression: fmt.Sprintf("request.userInfo.username.startsWith(%q)", prefix)},
		[]admissionregistrationv1.Variable{
			{Name: "clusterID", Expression: fmt.Sprintf("request.userInfo.username.substring(size(%q))", prefix)},
			{Name: "tokenRequest", Expression: tokenRequest},
		},
		validations)
}

// joinPolicy confines the join identity to what enrolment creates: ServiceAccounts
// cluster-<id> labelled <id>, the first token of such a ServiceAccount while it is not bound
// yet, and RoleBindings of exactly that ServiceAccount to the cluster Role. Without it the join
// credential could bind the cluster Role to a subject the ownership policy does not confine,
// such as itself, or request a token of an enrolled cluster and act as that cluster.
func joinPolicy(namespace string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	p := v1alpha1.ClusterServiceAccountPrefix
	var quoted []string
	for _, id := range v1alpha1.ReservedClusterIDs {
		quoted = append(quoted, strconv.Quote(v1alpha1.ClusterServiceAccount(id)))
	}
	reservedAccounts := "[" + strings.Join(quoted, ", ") + "]"
	// A ServiceAccount counts as bound (its cluster enrolled) once it may list Clusters, which
	// only its RoleBinding grants. The authorizer answers from the API server's RBAC cache,
	// the same one that authorizes the cluster's own requests.
	bound := fmt.Sprintf(`authorizer.serviceAccount(%[1]q, request.name).group("octopus.io").resource("clusters").namespace(%[1]q).check("list").allowed()`, namespace)
	validations := []admissionregistrationv1.Validation{
		{
			Expression: fmt.Sprintf(`request.resource.resource != "serviceaccounts" || %[3]s != "" || request.operation == 'DELETE' || (object.metadata.name.startsWith(%[1]q) && has(object.metadata.labels) && %[2]q in object.metadata.labels && object.metadata.labels[%[2]q] == object.metadata.name.substring(size(%[1]q)))`, p, v1alpha1.ClusterLabel, subResource),
			Message:    fmt.Sprintf("the join identity may only create ServiceAccounts named %s<id> labelled %s=<id>", p, v1alpha1.ClusterLabel),
		},
		{
			// The hub gateway's Peer is labelled hub, and a cluster's heartbeat Lease is named
			// after its ID, as is the hub gateway's election Lease: a cluster holding one of
			// these IDs could rewrite that Peer or take that Lease.
			Expression: fmt.Sprintf(`request.resource.resource != "serviceaccounts" || %s != "" || request.operation == 'DELETE' || !(object.metadata.name in %s)`, subResource, reservedAccounts),
			Message:    fmt.Sprintf("the join identity may only create ServiceAccounts for cluster IDs other than %s, which are reserved for the hub's own components", strings.Join(v1alpha1.ReservedClusterIDs, " and ")),
		},
		{
			Expression: fmt.Sprintf(`!(%s) || (request.name.startsWith(%q) && !(request.name in %s) && %s)`, tokenRequest, p, reservedAccounts, tokenShape()),
			Message: fmt.Sprintf("the join identity may only request tokens of a cluster's ServiceAccount %s<id>, lasting at most %ds",
				p, int64(ClusterTokenLifetime/time.Second)),
		},
		{
			// Join replaces a cluster account that is not bound yet instead of adopting it
			// (someone else holding broker-info may have made it and hold its token); a bound
			// one is a cluster's credential and stays.
			Expression:        fmt.Sprintf(`request.operation != 'DELETE' || (request.resource.resource == "serviceaccounts" && %s == "" && request.name.startsWith(%q) && !(%s))`, subResource, p, bound),
			MessageExpression: `"the join identity may only delete cluster ServiceAccounts that are not bound yet: " + request.name + " is already enrolled (to replace its credential, revoke it on the hub first)"`,
		},
		{
			// The core of the model: broker-info enrols a cluster and obtains that cluster's
			// first credential, never the credential of a cluster already enrolled.
			Expression:        fmt.Sprintf(`!(%s) || !(%s)`, tokenRequest, bound),
			MessageExpression: fmt.Sprintf(`"the join identity may only request the first token of a ServiceAccount, before it is bound to Role %s: " + request.name + " is already enrolled (to replace its credential, revoke it on the hub first)"`, v1alpha1.ClusterCredentialRole),
		},
		{
			Expression: fmt.Sprintf(`request.resource.resource != "rolebindings" || (object.metadata.name.startsWith(%q) && object.roleRef.kind == "Role" && object.roleRef.name == %q && size(object.subjects) == 1 && object.subjects[0].kind == "ServiceAccount" && object.subjects[0].name == object.metadata.name && object.subjects[0].namespace == %q)`,
				p, v1alpha1.ClusterCredentialRole, namespace),
			Message: fmt.Sprintf("the join identity may only bind Role %s to the ServiceAccount %s<id> named like the binding", v1alpha1.ClusterCredentialRole, p),
		},
	}
	for i := range validations {
		validations[i].Reason = ptr.To(metav1.StatusReasonForbidden)
	}
	return policyAndBinding(JoinPolicyName, namespace,
		admissionregistrationv1.MatchCondition{Name: "join-credential", Expression: fmt.Sprintf("request.userInfo.username == %q", fmt.Sprintf("system:serviceaccount:%s:%s", namespace, JoinServiceAccount))},
		nil, validations)
}

func policyAndBinding(name, namespace string, match admissionregistrationv1.MatchCondition, vars []admissionregistrationv1.Variable, validations []admissionregistrationv1.Validation) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: kube.ManagedLabels()},
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
			MatchConditions: []admissionregistrationv1.MatchCondition{match},
			Variables:       vars,
			Validations:     validations,
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: kube.ManagedLabels()},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding
}
