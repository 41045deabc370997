package operator_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/rbac"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestOperatorRBACOnNodes: the operator's generated ClusterRole (the one its chart installs),
// bound to its ServiceAccount on a real API server, lets it do to Nodes what it does (read,
// watch, label) and nothing else: it can no longer create or delete a Node (issue 30, least
// privilege; the role granted every verb on Nodes before).
func TestOperatorRBACOnNodes(t *testing.T) {
	env := testenv.ControlPlanes(t, "a")
	cfg := env.Cluster("a").RESTConfig()
	ctx := t.Context()
	admin, err := client.New(cfg, client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	roles, err := rbac.Load(rbac.Operator)
	if err != nil || roles.ClusterRole == nil {
		t.Fatalf("the operator's ClusterRole: %v", err)
	}
	for _, obj := range []client.Object{
		roles.ClusterRole,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: roles.ClusterRole.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roles.ClusterRole.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "octopus-operator", Namespace: v1alpha1.OperatorNamespace}},
		},
	} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
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
