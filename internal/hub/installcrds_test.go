package hub

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/kube"
	"github.com/octopus-mcs/octopus/internal/testenv"
)

// TestInstallCRDsLeavesForeignCRDsAlone: a CRD another tool installed (here ClusterProperty)
// is used as it is, not taken over, so that leaving never deletes it.
func TestInstallCRDsLeavesForeignCRDsAlone(t *testing.T) {
	env := testenv.ControlPlanes(t, "member")
	c, err := client.New(env.Cluster("member").RESTConfig(), client.Options{Scheme: kube.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	member, err := crd.Member()
	if err != nil {
		t.Fatal(err)
	}
	var foreign *apiextensionsv1.CustomResourceDefinition
	for _, def := range member {
		if def.Spec.Group == "about.k8s.io" {
			foreign = def.DeepCopy()
		}
	}
	foreign.Labels = map[string]string{"app.kubernetes.io/managed-by": "someone-else"}
	if err := c.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	if err := InstallCRDs(t.Context(), c, member); err != nil {
		t.Fatal(err)
	}
	got := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(foreign), got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[kube.ManagedByLabel] != "someone-else" {
		t.Errorf("the foreign CRD was taken over: labels %v", got.Labels)
	}
	for _, mf := range got.ManagedFields {
		if mf.Manager == kube.FieldManager {
			t.Errorf("octopus applied fields to the foreign CRD: %+v", mf)
		}
	}
}
