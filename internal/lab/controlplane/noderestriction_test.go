package controlplane_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestNodeRestriction: the API servers of the tests and the lab run the NodeRestriction
// admission plugin, as production clusters do. With a kubelet's own credential
// (system:node:<name>, what the lab's kubelets hold) a node can label itself with the old
// gateway label (v1alpha1.LegacyGatewayNodeLabel), which let any node claim the gateway and its
// hub credential, but not with v1alpha1.GatewayNodeLabel, which only an administrator can set,
// and it cannot touch another Node at all.
func TestNodeRestriction(t *testing.T) {
	env := testenv.ControlPlanes(t, "a")
	cp := env.Cluster("a")
	admin := testenv.Client(t, cp.RESTConfig())
	testenv.AddNode(t, admin, "n1", "192.0.2.1", "")
	testenv.AddNode(t, admin, "n2", "192.0.2.2", "")
	cert, key, err := cp.IssueClient("system:node:n1", []string{"system:nodes"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(cp.RESTConfig())
	cfg.CertData, cfg.KeyData = cert, key
	asNode := kubernetes.NewForConfigOrDie(cfg)
	asAdmin := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	label := func(cs kubernetes.Interface, node, key string) error {
		patch := []byte(`{"metadata":{"labels":{"` + key + `":"true"}}}`)
		_, err := cs.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	const restricted = corev1.LabelNamespaceNodeRestriction + "/example"
	for _, tc := range []struct {
		what          string
		cs            kubernetes.Interface
		node, key     string
		wantForbidden bool
	}{
		{"a node labels itself with the old gateway label", asNode, "n1", v1alpha1.LegacyGatewayNodeLabel, false},
		{"a node labels itself with the gateway label", asNode, "n1", v1alpha1.GatewayNodeLabel, true},
		{"a node labels itself with another node-restriction label", asNode, "n1", restricted, true},
		{"a node labels another node", asNode, "n2", "example.com/x", true},
		{"an administrator sets the gateway label", asAdmin, "n1", v1alpha1.GatewayNodeLabel, false},
	} {
		err := label(tc.cs, tc.node, tc.key)
		if tc.wantForbidden != apierrors.IsForbidden(err) || (!tc.wantForbidden && err != nil) {
			t.Errorf("%s: %v, want forbidden %v", tc.what, err, tc.wantForbidden)
		}
	}
}
