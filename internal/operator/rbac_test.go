package operator_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestOperatorRBAC: the operator's roles as its chart installs them (chartgen's
// OperatorRoles), on a real API server, let it do to Nodes what it does (read, watch, label)
// and nothing else (issue 30, least privilege; the role granted every verb on Nodes before);
// let it install the components' roles but not grant more than it holds (with escalate and
// bind, which it had, it could make itself cluster-admin); and keep Secrets, tokens and
// workloads to its own namespaces (it could read every Secret and run a pod as any
// ServiceAccount before).
func TestOperatorRBAC(t *testing.T) {
	env := testenv.ControlPlanes(t, "a")
	cfg := env.Cluster("a").RESTConfig()
	ctx := t.Context()
	// The chart's RBAC, hub.enabled off: what a member's operator runs with.
	admin := start(t, cfg, false).admin
	testenv.AddNode(t, admin, "node-a", "192.0.2.1", "")
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + v1alpha1.OperatorNamespace + ":octopus-operator"}
	op, err := client.New(as, client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	label := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+v1alpha1.GatewayNodeLabel+`":"true"}}}`))
	for _, tc := range []struct {
		what    string
		do      func() error
		allowed bool
	}{
		{"list nodes", func() error { return op.List(ctx, &corev1.NodeList{}) }, true},
		{"label a node", func() error { return op.Patch(ctx, node.DeepCopy(), label) }, true},
		{"list the gateway pods", func() error { return op.List(ctx, &corev1.PodList{}, client.InNamespace(v1alpha1.SystemNamespace)) }, true},
		{"create a node", func() error {
			return op.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rogue"}})
		}, false},
		{"delete a node", func() error { return op.Delete(ctx, node.DeepCopy()) }, false},
		{"replace a node", func() error {
			n := &corev1.Node{}
			if err := admin.Get(ctx, client.ObjectKeyFromObject(node), n); err != nil {
				return err
			}
			return op.Update(ctx, n)
		}, false},
		{"delete a pod", func() error {
			return op.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "any"}})
		}, false},
		// No escalate or bind: it installs roles only with rules it holds itself.
		{"install a role the components use", func() error {
			return kube.Apply(ctx, op, &rbacv1.ClusterRole{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
				ObjectMeta: metav1.ObjectMeta{Name: "octopus-gateway"},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}},
			})
		}, true},
		{"write a role granting everything", func() error {
			return kube.Apply(ctx, op, &rbacv1.ClusterRole{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
				ObjectMeta: metav1.ObjectMeta{Name: "octopus-gateway"},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
			})
		}, false},
		{"write a role granting exec into pods", func() error {
			return kube.Apply(ctx, op, &rbacv1.Role{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
				ObjectMeta: metav1.ObjectMeta{Name: "octopus-rogue", Namespace: "default"},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}}},
			})
		}, false},
		// Namespaced kinds only where it writes them.
		{"read a Secret of the member's namespace", func() error {
			return client.IgnoreNotFound(op.Get(ctx, client.ObjectKey{Namespace: v1alpha1.SystemNamespace, Name: "any"}, &corev1.Secret{}))
		}, true},
		{"read a Secret of kube-system", func() error {
			return op.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "any"}, &corev1.Secret{})
		}, false},
		{"list the Secrets of every namespace", func() error { return op.List(ctx, &corev1.SecretList{}) }, false},
		{"mint a token for a ServiceAccount of kube-system", func() error {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "default"}}
			return op.SubResource("token").Create(ctx, sa, &authenticationv1.TokenRequest{})
		}, false},
		{"run a Deployment in kube-system", func() error {
			return op.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "rogue"},
				Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}})
		}, false},
		{"delete namespace kube-system", func() error {
			return op.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}})
		}, false},
		{"apply the member's namespace", func() error {
			return kube.Apply(ctx, op, &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
				ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SystemNamespace}})
		}, true},
		{"bind itself to cluster-admin", func() error {
			return kube.Apply(ctx, op, &rbacv1.ClusterRoleBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
				ObjectMeta: metav1.ObjectMeta{Name: "octopus-rogue"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "octopus-operator", Namespace: v1alpha1.OperatorNamespace}},
			})
		}, false},
	} {
		err := tc.do()
		switch {
		case tc.allowed && err != nil:
			t.Errorf("%s: %v, want allowed", tc.what, err)
		case !tc.allowed && !apierrors.IsForbidden(err):
			t.Errorf("%s: %v, want Forbidden", tc.what, err)
		}
	}
}
