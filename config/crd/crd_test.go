package crd

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
)

// TestGeneratedFilesAreFresh fails when api/ or an RBAC marker changed without `make
// generate`: it regenerates every output of hack/generate.sh (deepcopy, CRDs, config/rbac)
// into a scratch directory and compares byte for byte with the tree.
func TestGeneratedFilesAreFresh(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cg := os.Getenv("CONTROLLER_GEN")
	if cg == "" {
		cg = filepath.Join(root, "bin", "controller-gen")
	}
	if _, err := os.Stat(cg); err != nil {
		t.Fatalf("controller-gen not found at %s: run `make tools` (or set CONTROLLER_GEN)", cg)
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "generate.sh"), cg, out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/generate.sh: %v\n%s", err, b)
	}
	checked := 0
	err = filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s is generated but missing from the tree: run `make generate`", rel)
			return nil //nolint:nilerr // reported above; keep comparing the other files
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make generate`", rel)
		}
		checked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 11 {
		t.Fatalf("only %d generated files compared; expected deepcopy for 2 packages, 5 CRDs and the RBAC of 4 components", checked)
	}
}

func TestEmbeddedCRDsDecode(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	inAll := map[string]bool{}
	for _, c := range all {
		if c.Name == "" || len(c.Spec.Versions) == 0 {
			t.Errorf("CRD %q decoded without name or versions", c.Name)
		}
		inAll[c.Name] = true
	}
	// Every CRD is installed somewhere (hub, member, or the MCS set every member gets), and
	// the sets name nothing that is not embedded. The hub shares ServiceImport with MCS.
	covered := map[string]bool{}
	for name, set := range map[string]func() ([]*apiextensionsv1.CustomResourceDefinition, error){"Hub": Hub, "Member": Member, "MCS": MCS} {
		crds, err := set()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, c := range crds {
			if !inAll[c.Name] {
				t.Errorf("%s returns %s, which All does not", name, c.Name)
			}
			covered[c.Name] = true
		}
	}
	if len(covered) != len(inAll) {
		t.Errorf("Hub, Member and MCS cover %d of the %d embedded CRDs", len(covered), len(inAll))
	}
}

// TestMCSCRDsMatchModule checks that the copies under mcs/ are exactly the CRDs of the
// sigs.k8s.io/mcs-api version go.mod requires, so bumping that module without re-copying them
// (or editing the copies) fails.
func TestMCSCRDsMatchModule(t *testing.T) {
	for file, want := range map[string][]byte{
		mcsServiceExports: mcscrd.ServiceExportCRD,
		mcsServiceImports: mcscrd.ServiceImportCRD,
	} {
		got, err := files.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from sigs.k8s.io/mcs-api's copy: cp $(go list -m -f '{{.Dir}}' sigs.k8s.io/mcs-api)/config/crd/*.yaml config/crd/mcs/", file)
		}
	}
	mcs, err := MCS()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range mcs {
		if v := c.Labels[mcscrd.ReleaseVersionLabel]; v != mcsVersion(t) {
			t.Errorf("CRD %s is release %q, go.mod requires %q", c.Name, v, mcsVersion(t))
		}
	}
}

// mcsVersion is the version of sigs.k8s.io/mcs-api that go.mod requires.
func mcsVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "sigs.k8s.io/mcs-api" {
			return f[1]
		}
	}
	t.Fatal("go.mod does not require sigs.k8s.io/mcs-api")
	return ""
}
