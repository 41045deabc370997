package render

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/crd"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with what the code renders now")

// golden compares objs, rendered as YAML, with testdata/name byte for byte.
func golden(t *testing.T, name string, objs []client.Object) {
	t.Helper()
	got, err := YAML(objs...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./internal/manifests/render -update` to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the rendered objects differ from %s; if the change is intended, run `go test ./internal/manifests/render -update` and review the diff.\ngot:\n%s", path, got)
	}
}

func crdNames(crds []*apiextensionsv1.CustomResourceDefinition) []string {
	var out []string
	for _, c := range crds {
		out = append(out, c.Name)
	}
	return out
}

func TestHubGolden(t *testing.T) {
	for _, tc := range []struct{ namespace, file string }{
		{"", "hub.yaml"},
		{"octopus-hub-2", "hub-namespace.yaml"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			h, err := Hub(HubOptions{Namespace: tc.namespace})
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.file, append([]client.Object{h.Namespace}, h.Objects...))
			want, err := crd.Hub()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(crdNames(h.CRDs), crdNames(want)) {
				t.Errorf("hub CRDs %v, want crd.Hub() %v", crdNames(h.CRDs), crdNames(want))
			}
			if len(h.All()) != 1+len(h.CRDs)+len(h.Objects) {
				t.Errorf("All() has %d objects, want every one of the %d", len(h.All()), 1+len(h.CRDs)+len(h.Objects))
			}
		})
	}
}

func TestMemberGolden(t *testing.T) {
	cred := hubaccess.Credential{ClusterID: "east", Server: "https://hub.example:6443", Namespace: v1alpha1.DefaultHubNamespace,
		CAData: []byte("-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n"), Token: "cluster-east-token"}
	m, err := Member(MemberOptions{Credential: cred, DNSImage: DNSImage + ":v0.0.0-test"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "member.yaml", append(slices.Clone(m.Objects), m.DNS...))
	member, err := crd.Member()
	if err != nil {
		t.Fatal(err)
	}
	mcs, err := crd.MCS()
	if err != nil {
		t.Fatal(err)
	}
	if want := append(crdNames(member), crdNames(mcs)...); !slices.Equal(crdNames(m.CRDs), want) {
		t.Errorf("member CRDs %v, want crd.Member() then crd.MCS() %v", crdNames(m.CRDs), want)
	}
	if _, err := Member(MemberOptions{Credential: cred}); err == nil {
		t.Error("Member without an octopus-dns image: no error")
	}
}

func TestEnrolmentGolden(t *testing.T) {
	sa := ClusterServiceAccount(v1alpha1.DefaultHubNamespace, "east", "4f9d7c1e-0000-4000-8000-000000000001")
	owned := sa.DeepCopy()
	owned.UID = types.UID("5a1e0b2c-0000-4000-8000-000000000002") // as the API server assigns it
	objs := []client.Object{sa, ClusterTokenRequest(ClusterTokenLifetime)}
	objs = append(objs, ClusterGrant(v1alpha1.DefaultHubNamespace, "east", owned))
	objs = append(objs, Cluster(v1alpha1.DefaultHubNamespace, v1alpha1.ClusterSpec{
		ClusterID: "east", PodCIDRs: []string{"10.1.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/16"},
		Addressing: v1alpha1.AddressingDirect, Topology: v1alpha1.TopologyMesh, GlobalCIDR: "242.0.0.0/16", SecondaryCIDR: "10.112.0.0/16",
	}))
	golden(t, "enrolment.yaml", objs)
}
