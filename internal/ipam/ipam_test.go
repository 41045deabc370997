package ipam

import (
	"net/netip"
	"slices"
	"testing"
)

func TestPoolBlocks(t *testing.T) {
	tests := []struct {
		pool      string
		bits, i   int
		want      string
		wantError bool
	}{
		{pool: "242.0.0.0/8", bits: 16, i: 0, want: "242.0.0.0/16"},
		{pool: "242.0.0.0/8", bits: 16, i: 1, want: "242.1.0.0/16"},
		{pool: "242.0.0.0/8", bits: 16, i: 255, want: "242.255.0.0/16"},
		{pool: "242.0.0.0/8", bits: 16, i: 256, wantError: true},
		{pool: "10.112.0.0/12", bits: 16, i: 15, want: "10.127.0.0/16"},
		{pool: "10.0.0.0/8", bits: 20, i: 3, want: "10.0.48.0/20"},
		{pool: "10.0.0.0/8", bits: 28, i: 17, want: "10.0.1.16/28"},
		{pool: "fd00::/48", bits: 64, i: 258, want: "fd00:0:0:102::/64"},
	}
	for _, tt := range tests {
		pool, err := ParsePool(tt.pool, tt.bits)
		if err != nil {
			t.Fatalf("ParsePool(%s, %d): %v", tt.pool, tt.bits, err)
		}
		got, err := pool.Block(tt.i)
		if tt.wantError {
			if err == nil {
				t.Errorf("%s/%d block %d: want error, got %s", tt.pool, tt.bits, tt.i, got)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("%s/%d block %d = %s, %v; want %s", tt.pool, tt.bits, tt.i, got, err, tt.want)
		}
	}
}

func TestParsePoolRejects(t *testing.T) {
	for _, tt := range []struct {
		cidr string
		bits int
	}{
		{"242.0.0.0/8", 7}, {"242.0.0.0/8", 33}, {"242.0.0.1/8", 16}, {"nonsense", 16}, {"", 16},
	} {
		if _, err := ParsePool(tt.cidr, tt.bits); err == nil {
			t.Errorf("ParsePool(%q, %d) accepted", tt.cidr, tt.bits)
		}
	}
}

func TestCandidatesSkipUsedAndOverlapping(t *testing.T) {
	pool, _ := ParsePool("10.112.0.0/12", 16)
	used := []netip.Prefix{
		netip.MustParsePrefix("10.112.0.0/16"),
		netip.MustParsePrefix("10.113.5.0/24"), // a smaller range inside a block still takes the block
	}
	got := pool.Candidates(used)
	if len(got) != 14 || got[0].String() != "10.114.0.0/16" {
		t.Fatalf("candidates = %v, want 14 starting at 10.114.0.0/16", got)
	}
}

func TestParsePrefixNamesTheFix(t *testing.T) {
	_, err := ParsePrefix("10.1.2.3/16")
	if err == nil || err.Error() != `"10.1.2.3/16" has host bits set; did you mean 10.1.0.0/16?` {
		t.Fatalf("err = %v", err)
	}
}

func TestSortPrefixes(t *testing.T) {
	in := []netip.Prefix{
		netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("10.1.0.0/24"),
		netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.2.0.0/16"),
	}
	orig := slices.Clone(in)
	got := SortPrefixes(in)
	want := []netip.Prefix{
		netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.1.0.0/24"),
		netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("fd00::/64"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("SortPrefixes = %v, want %v", got, want)
	}
	if !slices.Equal(in, orig) {
		t.Errorf("SortPrefixes changed its input to %v", in)
	}
}

func TestSameFamily(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   []string
		a, b string // "" when no two share a family
	}{
		{"empty", nil, "", ""},
		{"IPv4 only", []string{"10.1.0.0/16"}, "", ""},
		{"dual-stack", []string{"10.1.0.0/16", "2001:db8:1::/56"}, "", ""},
		{"dual-stack, IPv6 first", []string{"2001:db8:1::/56", "10.1.0.0/16"}, "", ""},
		{"two IPv4", []string{"10.1.0.0/16", "10.2.0.0/16"}, "10.1.0.0/16", "10.2.0.0/16"},
		{"two IPv6 around an IPv4", []string{"2001:db8:1::/56", "10.1.0.0/16", "2001:db8:2::/56"}, "2001:db8:1::/56", "2001:db8:2::/56"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ps []netip.Prefix
			for _, s := range tt.in {
				ps = append(ps, netip.MustParsePrefix(s))
			}
			a, b, found := SameFamily(ps)
			if found != (tt.a != "") {
				t.Fatalf("SameFamily(%v) found = %v, want %v", tt.in, found, tt.a != "")
			}
			if found && (a.String() != tt.a || b.String() != tt.b) {
				t.Errorf("SameFamily(%v) = %s, %s; want %s, %s", tt.in, a, b, tt.a, tt.b)
			}
		})
	}
}
