package ipam

import (
	"net/netip"
	"testing"
)

func TestAddAndOffset(t *testing.T) {
	tests := []struct {
		a    string
		n    uint64
		want string // "" for beyond the family's last address
	}{
		{"242.1.0.0", 0, "242.1.0.0"},
		{"242.1.0.0", 7, "242.1.0.7"},
		{"242.1.0.250", 10, "242.1.1.4"},
		{"242.1.255.255", 1, "242.2.0.0"},
		{"255.255.255.254", 1, "255.255.255.255"},
		{"255.255.255.255", 1, ""},
		{"fd00::ffff", 1, "fd00::1:0"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1, ""},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.a)
		got, ok := Add(a, tt.n)
		if tt.want == "" {
			if ok {
				t.Errorf("Add(%s, %d) = %s, want overflow", tt.a, tt.n, got)
			}
			continue
		}
		if !ok || got.String() != tt.want {
			t.Errorf("Add(%s, %d) = %s, %v; want %s", tt.a, tt.n, got, ok, tt.want)
			continue
		}
		if off := Offset(a, got); off != tt.n {
			t.Errorf("Offset(%s, %s) = %d, want %d", a, got, off, tt.n)
		}
	}
}

func TestRange(t *testing.T) {
	r := RangeOf(netip.MustParsePrefix("242.1.0.8/29"))
	if r.String() != "242.1.0.8-242.1.0.15" || r.Len() != 8 || r.Validate() != nil {
		t.Fatalf("RangeOf(242.1.0.8/29) = %s (%d addresses, %v)", r, r.Len(), r.Validate())
	}
	for a, want := range map[string]bool{"242.1.0.7": false, "242.1.0.8": true, "242.1.0.15": true, "242.1.0.16": false, "::ffff:242.1.0.9": false} {
		if got := r.Contains(netip.MustParseAddr(a)); got != want {
			t.Errorf("%s contains %s = %v", r, a, got)
		}
	}
	mk := func(a, b string) Range { return Range{netip.MustParseAddr(a), netip.MustParseAddr(b)} }
	if !r.Overlaps(mk("242.1.0.15", "242.1.0.20")) || r.Overlaps(mk("242.1.0.16", "242.1.0.20")) {
		t.Error("Overlaps is wrong at the range's end")
	}
	if !r.Within(netip.MustParsePrefix("242.1.0.0/24")) || r.Within(netip.MustParsePrefix("242.1.0.12/30")) {
		t.Error("Within is wrong")
	}
	for _, bad := range []Range{{}, mk("242.1.0.9", "242.1.0.8"), mk("242.1.0.8", "fd00::1")} {
		if bad.Validate() == nil {
			t.Errorf("range %s validated", bad)
		}
	}
	if v6 := RangeOf(netip.MustParsePrefix("fd00::/64")); v6.Last.String() != "fd00::ffff:ffff:ffff:ffff" || v6.Len() != 1<<63-1 {
		t.Errorf("RangeOf(fd00::/64) = %s with %d addresses; want it to end at fd00::ffff:ffff:ffff:ffff and the length capped", v6, v6.Len())
	}
}
