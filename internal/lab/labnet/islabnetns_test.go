package labnet

import "testing"

// TestIsLabNetns: every namespace a lab names is recognised, whatever its ID; other tests'
// fixtures are not.
func TestIsLabNetns(t *testing.T) {
	id := LabID(t.TempDir())
	for name, want := range map[string]bool{
		NetnsOwnerPrefix(id) + "c1-n1": true,
		PodNetnsName(id, "0b5c"):       true,
		"ovnt1c5982-node":              false,
		"otb-gw1":                      false,
		"cni-1234":                     false,
	} {
		if got := IsLabNetns(name); got != want {
			t.Errorf("IsLabNetns(%q) = %v, want %v", name, got, want)
		}
	}
}
