package verify

import "testing"

// TestResultNameFamily checks that a family shows in a check's name, and only then.
func TestResultNameFamily(t *testing.T) {
	r := Result{Check: CheckDNS, From: "east", To: "west"}
	if got := r.Name(); got != "dns east->west" {
		t.Errorf("Name() = %q", got)
	}
	r.Family = "IPv6"
	if got := r.Name(); got != "dns/IPv6 east->west" {
		t.Errorf("Name() with a family = %q", got)
	}
}
