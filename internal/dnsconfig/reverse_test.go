package dnsconfig

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestArpaZones(t *testing.T) {
	for _, tc := range []struct {
		name     string
		prefixes []string
		want     []string
	}{
		{"a /16: one zone", []string{"10.1.0.0/16"}, []string{"1.10.in-addr.arpa"}},
		{"a /24 and a /8", []string{"10.2.3.0/24", "11.0.0.0/8"}, []string{"11.in-addr.arpa", "3.2.10.in-addr.arpa"}},
		{"a /23: split in two /24s", []string{"10.1.2.0/23"}, []string{"2.1.10.in-addr.arpa", "3.1.10.in-addr.arpa"}},
		{"a /14: four /16s", []string{"10.4.0.0/14"}, []string{"4.10.in-addr.arpa", "5.10.in-addr.arpa", "6.10.in-addr.arpa", "7.10.in-addr.arpa"}},
		{"a /26: the /24 around it", []string{"10.1.2.64/26"}, []string{"2.1.10.in-addr.arpa"}},
		{"carry across octets", []string{"10.1.255.0/23"}, []string{"254.1.10.in-addr.arpa", "255.1.10.in-addr.arpa"}},
		{"duplicates once", []string{"10.1.0.0/16", "10.1.0.0/16"}, []string{"1.10.in-addr.arpa"}},
		{"too broad: nothing", []string{"0.0.0.0/0", "10.0.0.0/7"}, nil},
		{"IPv6 /48", []string{"2001:db8:1::/48"}, []string{"1.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa"}},
		{"IPv6 /47: two nibble zones", []string{"2001:db8:2::/47"}, []string{"2.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa", "3.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ps []netip.Prefix
			for _, s := range tc.prefixes {
				ps = append(ps, netip.MustParsePrefix(s))
			}
			if got := ArpaZones(ps); !slices.Equal(got, tc.want) {
				t.Errorf("ArpaZones(%v) = %v, want %v", tc.prefixes, got, tc.want)
			}
		})
	}
}

// TestPatchReverse checks that the reverse zones join the managed block's keys, that Patch
// keeps them, that zones of the user's own blocks are left out, that a Corefile without the
// block is not given one, and that Unpatch still restores the original byte for byte.
func TestPatchReverse(t *testing.T) {
	original := readCorefile(t, "kubeadm")
	if out, changed, err := PatchReverse(original, []string{"1.10.in-addr.arpa"}); err != nil || changed || out != original {
		t.Fatalf("PatchReverse without Octopus's block = changed %v, %v; want the Corefile unchanged", changed, err)
	}
	patched, err := Patch(original, target)
	if err != nil {
		t.Fatal(err)
	}
	withUser := patched + "\n5.10.in-addr.arpa:53 {\n    whoami\n}\n"
	rev, changed, err := PatchReverse(withUser, []string{"2.10.in-addr.arpa.", "1.10.in-addr.arpa", "5.10.in-addr.arpa"})
	if err != nil || !changed {
		t.Fatalf("PatchReverse = changed %v, %v", changed, err)
	}
	if !strings.Contains(rev, "clusterset.local:53 1.10.in-addr.arpa:53 2.10.in-addr.arpa:53 {\n    errors\n    forward . 10.96.0.20:53\n}\n") {
		t.Errorf("no forwarding block with the reverse zones (the user's 5.10.in-addr.arpa left out) in:\n%s", rev)
	}
	if _, err := serverBlocks(rev); err != nil {
		t.Fatalf("the patched Corefile does not parse: %v\n%s", err, rev)
	}
	if got := ReverseZones(rev); !slices.Equal(got, []string{"1.10.in-addr.arpa", "2.10.in-addr.arpa"}) {
		t.Errorf("ReverseZones = %v", got)
	}
	if again, changed, err := PatchReverse(rev, []string{"1.10.in-addr.arpa", "2.10.in-addr.arpa"}); err != nil || changed || again != rev {
		t.Errorf("PatchReverse again = changed %v, %v; want no change", changed, err)
	}
	// join's Patch (a new octopus-dns address) keeps the zones.
	moved, err := Patch(rev, []netip.AddrPort{netip.MustParseAddrPort("10.96.0.30:53")})
	if err != nil || !strings.Contains(moved, "clusterset.local:53 1.10.in-addr.arpa:53 2.10.in-addr.arpa:53 {\n    errors\n    forward . 10.96.0.30:53\n}\n") {
		t.Errorf("Patch dropped the reverse zones (%v):\n%s", err, moved)
	}
	// A cluster gone: its zone goes.
	fewer, _, err := PatchReverse(rev, []string{"2.10.in-addr.arpa"})
	if err != nil || !strings.Contains(fewer, "clusterset.local:53 2.10.in-addr.arpa:53 {") {
		t.Errorf("PatchReverse with fewer zones (%v):\n%s", err, fewer)
	}
	// leave's Unpatch restores the user's Corefile byte for byte, their later block included.
	if back, ok := Unpatch(rev); !ok || back != original+"\n5.10.in-addr.arpa:53 {\n    whoami\n}\n" {
		t.Errorf("Unpatch did not restore the original:\n%q", back)
	}
}
