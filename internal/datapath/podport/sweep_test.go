package podport

import (
	"slices"
	"testing"
)

func TestParseSandboxes(t *testing.T) {
	// As ovs-vsctl 3.1 prints it: an interface of ours, br-int's own, one of someone else's.
	out := `{"data":[[["map",[["iface-id","east_default_a"],["octopus-sandbox","0123abcd"]]]],[["map",[]]],[["map",[["iface-id","other"]]]]],"headings":["external_ids"]}`
	got, err := parseSandboxes([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"0123abcd"}) {
		t.Fatalf("parseSandboxes = %v, want [0123abcd]", got)
	}
	if _, err := parseSandboxes([]byte("not json")); err == nil {
		t.Fatal("parseSandboxes of garbage succeeded")
	}
}
