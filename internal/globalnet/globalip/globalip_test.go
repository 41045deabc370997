package globalip

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/internal/ipam"
)

func rng(first, last string) ipam.Range {
	return ipam.Range{First: netip.MustParseAddr(first), Last: netip.MustParseAddr(last)}
}

func TestNewLayout(t *testing.T) {
	tests := []struct {
		cidr    string
		egress  int
		want    Layout
		wantErr string
	}{
		{cidr: "242.1.0.0/16", want: Layout{
			ClusterEgress: rng("242.1.0.0", "242.1.0.7"), HealthCheck: netip.MustParseAddr("242.1.255.255"),
			Pool: rng("242.1.0.8", "242.1.255.254"),
		}},
		{cidr: "242.1.0.0/24", egress: 16, want: Layout{
			ClusterEgress: rng("242.1.0.0", "242.1.0.15"), HealthCheck: netip.MustParseAddr("242.1.0.255"),
			Pool: rng("242.1.0.16", "242.1.0.254"),
		}},
		{cidr: "242.1.0.0/28", egress: 14, want: Layout{
			ClusterEgress: rng("242.1.0.0", "242.1.0.13"), HealthCheck: netip.MustParseAddr("242.1.0.15"),
			Pool: rng("242.1.0.14", "242.1.0.14"),
		}},
		{cidr: "fd00:0:0:1::/64", want: Layout{
			ClusterEgress: rng("fd00:0:0:1::", "fd00:0:0:1::7"), HealthCheck: netip.MustParseAddr("fd00:0:0:1:ffff:ffff:ffff:ffff"),
			Pool: rng("fd00:0:0:1::8", "fd00:0:0:1:ffff:ffff:ffff:fffe"),
		}},
		{cidr: "242.1.0.0/28", egress: 15, wantErr: "242.1.0.0/28 (16 addresses) cannot hold an egress range of 15"},
		{cidr: "242.1.0.0/32", wantErr: "cannot hold"},
		{cidr: "242.1.0.1/16", wantErr: "did you mean 242.1.0.0/16"},
		{cidr: "242.1.0.0/16", egress: -1, wantErr: "cannot hold an egress range of -1"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s-%d", tt.cidr, tt.egress), func(t *testing.T) {
			got, err := NewLayout(netip.MustParsePrefix(tt.cidr), tt.egress)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			tt.want.CIDR = netip.MustParsePrefix(tt.cidr)
			if err != nil || got != tt.want {
				t.Fatalf("NewLayout = %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}
}

func one(a string) ipam.Range { return rng(a, a) }

func TestAssign(t *testing.T) {
	pool := rng("242.1.0.8", "242.1.0.15") // 8 addresses
	tests := []struct {
		name           string
		claims         []Claim
		want           map[string]ipam.Range // only the keys listed are checked exactly
		wantCount      int                   // assigned claims
		wantUnassigned []string
	}{
		{
			name:   "held addresses are kept",
			claims: []Claim{{Key: "a", Size: 1, Held: one("242.1.0.9")}, {Key: "b", Size: 1, Held: one("242.1.0.15")}},
			want:   map[string]ipam.Range{"a": one("242.1.0.9"), "b": one("242.1.0.15")}, wantCount: 2,
		},
		{
			name: "the earlier of two claims holding one address keeps it",
			claims: []Claim{
				{Key: "old", Size: 1, Held: one("242.1.0.9")},
				{Key: "young", Size: 1, Held: one("242.1.0.9")},
			},
			want: map[string]ipam.Range{"old": one("242.1.0.9")}, wantCount: 2,
		},
		{
			name:      "an address outside the pool (egress range grown) is replaced",
			claims:    []Claim{{Key: "a", Size: 1, Held: one("242.1.0.7")}},
			wantCount: 1,
		},
		{
			name:      "a held range of the wrong size is replaced",
			claims:    []Claim{{Key: "a", Size: 2, Held: one("242.1.0.9")}},
			wantCount: 1,
		},
		{
			name:   "a duplicate key counts once",
			claims: []Claim{{Key: "a", Size: 1, Held: one("242.1.0.9")}, {Key: "a", Size: 1, Held: one("242.1.0.10")}},
			want:   map[string]ipam.Range{"a": one("242.1.0.9")}, wantCount: 1,
		},
		{
			name: "exhaustion leaves the last claims out, takes nothing away",
			claims: func() []Claim {
				var cs []Claim
				for i := range 10 {
					cs = append(cs, Claim{Key: fmt.Sprintf("svc-%d", i), Size: 1})
				}
				cs[9].Held = one("242.1.0.8") // the youngest holds an address: it keeps it
				return cs
			}(),
			want: map[string]ipam.Range{"svc-9": one("242.1.0.8")}, wantCount: 8,
			wantUnassigned: []string{"svc-7", "svc-8"},
		},
		{
			name:   "a range needs consecutive free addresses",
			claims: []Claim{{Key: "a", Size: 1, Held: one("242.1.0.11")}, {Key: "ns", Size: 4}},
			want:   map[string]ipam.Range{"a": one("242.1.0.11"), "ns": rng("242.1.0.12", "242.1.0.15")}, wantCount: 2,
		},
		{
			name:   "a range that fits nowhere",
			claims: []Claim{{Key: "a", Size: 1, Held: one("242.1.0.11")}, {Key: "ns", Size: 5}},
			want:   map[string]ipam.Range{"a": one("242.1.0.11")}, wantCount: 1, wantUnassigned: []string{"ns"},
		},
		{
			name:   "size zero is refused",
			claims: []Claim{{Key: "a"}}, wantUnassigned: []string{"a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, unassigned := Assign(pool, tt.claims)
			for k, want := range tt.want {
				if got[k] != want {
					t.Errorf("%s = %s, want %s", k, got[k], want)
				}
			}
			if len(got) != tt.wantCount || !slices.Equal(unassigned, tt.wantUnassigned) {
				t.Errorf("assigned %d (%v), unassigned %v; want %d and %v", len(got), got, unassigned, tt.wantCount, tt.wantUnassigned)
			}
			checkInvariants(t, pool, tt.claims, got, unassigned)
		})
	}
}

// TestAssignIsStable: an address freed by one claim is not the next one handed out, and a claim
// made again under its old key gets its old address back while it is free.
func TestAssignIsStable(t *testing.T) {
	pool := rng("242.1.0.8", "242.1.255.254")
	var claims []Claim
	for i := range 100 {
		claims = append(claims, Claim{Key: fmt.Sprintf("demo/svc-%d", i), Size: 1})
	}
	first, _ := Assign(pool, claims)
	// Record, then unexport svc-0 and export a new service.
	for i := range claims {
		claims[i].Held = first[claims[i].Key]
	}
	freed := first["demo/svc-0"]
	second, _ := Assign(pool, append(slices.Clone(claims[1:]), Claim{Key: "demo/new", Size: 1}))
	if second["demo/new"] == freed {
		t.Errorf("the new service got %s, the address just freed", freed)
	}
	for _, c := range claims[1:] {
		if second[c.Key] != first[c.Key] {
			t.Errorf("%s moved from %s to %s", c.Key, first[c.Key], second[c.Key])
		}
	}
	third, _ := Assign(pool, append(slices.Clone(claims[1:]), Claim{Key: "demo/svc-0", Size: 1}))
	if third["demo/svc-0"] != freed {
		t.Errorf("svc-0 exported again got %s, want its old %s", third["demo/svc-0"], freed)
	}
}

func TestAssignScales(t *testing.T) {
	pool := rng("242.1.0.8", "242.1.255.254")
	n := int(pool.Len())
	claims := make([]Claim, 0, n+1000)
	for i := range n + 1000 {
		claims = append(claims, Claim{Key: fmt.Sprintf("ns/svc-%d", i), Size: 1})
	}
	got, unassigned := Assign(pool, claims) // a full /16 and then some: must stay fast
	if len(got) != n || len(unassigned) != 1000 {
		t.Fatalf("assigned %d, unassigned %d; want %d and 1000", len(got), len(unassigned), n)
	}
}

// checkInvariants: every assignment lies in the pool, has the claim's size, overlaps no other,
// and every claim is either assigned or unassigned, exactly once; held ranges that were valid
// and uncontested are kept; an unassigned single address means the pool had none left.
func checkInvariants(t *testing.T, pool ipam.Range, claims []Claim, got map[string]ipam.Range, unassigned []string) {
	t.Helper()
	size := map[string]int{}
	var order []string
	for _, c := range claims {
		if _, dup := size[c.Key]; !dup {
			size[c.Key] = c.Size
			order = append(order, c.Key)
		}
	}
	un := map[string]bool{}
	for _, k := range unassigned {
		if un[k] || got[k] != (ipam.Range{}) {
			t.Fatalf("%s is unassigned twice or also assigned", k)
		}
		un[k] = true
	}
	if len(got)+len(un) != len(order) {
		t.Fatalf("%d assigned + %d unassigned != %d claims", len(got), len(un), len(order))
	}
	keys := slices.Sorted(maps.Keys(got))
	var total uint64
	for i, k := range keys {
		r := got[k]
		total += r.Len()
		if !pool.Contains(r.First) || !pool.Contains(r.Last) || r.Len() != uint64(size[k]) {
			t.Fatalf("%s = %s: outside pool %s or not of size %d", k, r, pool, size[k])
		}
		for _, o := range keys[i+1:] {
			if r.Overlaps(got[o]) {
				t.Fatalf("%s = %s overlaps %s = %s", k, r, o, got[o])
			}
		}
	}
	for _, k := range order {
		if un[k] && size[k] == 1 && total < min(pool.Len(), MaxPool) {
			t.Fatalf("%s got no address while %d of %d were free", k, min(pool.Len(), MaxPool)-total, pool.Len())
		}
	}
}

// FuzzAssign: whatever the claims and what they hold, Assign keeps its invariants and is
// deterministic, and a second round with the first round's result recorded changes nothing.
func FuzzAssign(f *testing.F) {
	f.Add([]byte{0, 3, 1, 0, 2, 1, 9, 1, 0, 0}, uint8(16))
	f.Add([]byte{5, 5, 5, 5, 5, 5, 5, 5}, uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, poolSize uint8) {
		pool := ipam.Range{First: netip.MustParseAddr("242.1.0.8")}
		pool.Last, _ = ipam.Add(pool.First, uint64(poolSize)) // 1..256 addresses
		var claims []Claim
		for len(data) >= 3 {
			key, sz, held := data[0]%32, int(data[1]%4), data[2]
			data = data[3:]
			c := Claim{Key: fmt.Sprintf("k%d", key), Size: sz}
			if held != 0 && sz > 0 {
				c.Held.First, _ = ipam.Add(netip.MustParseAddr("242.1.0.0"), uint64(held))
				c.Held.Last, _ = ipam.Add(c.Held.First, uint64(binary.BigEndian.Uint16([]byte{0, held % 3})))
			}
			claims = append(claims, c)
		}
		got, unassigned := Assign(pool, claims)
		checkInvariants(t, pool, claims, got, unassigned)
		again, unAgain := Assign(pool, claims)
		if !maps.Equal(got, again) || !slices.Equal(unassigned, unAgain) {
			t.Fatal("Assign is not deterministic")
		}
		recorded := slices.Clone(claims)
		for i := range recorded {
			recorded[i].Held = got[recorded[i].Key]
		}
		next, _ := Assign(pool, recorded)
		for k, r := range got {
			if next[k] != r {
				t.Fatalf("recorded %s = %s moved to %s", k, r, next[k])
			}
		}
	})
}
