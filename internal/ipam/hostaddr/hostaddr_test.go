package hostaddr

import (
	"errors"
	"net/netip"
	"testing"
)

func mustBlock(t testing.TB, cidr string) Block {
	t.Helper()
	b, err := NewBlock(netip.MustParsePrefix(cidr))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func addrs(ss ...string) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, s := range ss {
		m[netip.MustParseAddr(s)] = true
	}
	return m
}

func TestNewBlock(t *testing.T) {
	for _, tc := range []struct {
		cidr    string
		wantErr bool
		size    int
	}{
		{cidr: "10.112.0.0/16", size: 65533},
		{cidr: "10.0.0.0/30", size: 1},
		{cidr: "10.0.0.0/31", wantErr: true},
		{cidr: "10.0.0.0/32", wantErr: true},
		{cidr: "10.0.0.1/24", wantErr: true},
		{cidr: "fd00::/64", wantErr: true},
	} {
		t.Run(tc.cidr, func(t *testing.T) {
			b, err := NewBlock(netip.MustParsePrefix(tc.cidr))
			if (err != nil) != tc.wantErr {
				t.Fatalf("NewBlock(%s) error = %v, want error: %v", tc.cidr, err, tc.wantErr)
			}
			if err == nil && b.Size() != tc.size {
				t.Errorf("Size() = %d, want %d", b.Size(), tc.size)
			}
		})
	}
	if _, err := NewBlock(netip.Prefix{}); err == nil {
		t.Error("NewBlock accepted the zero prefix")
	}
}

func TestNext(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cidr   string
		cursor string // "" = no cursor
		used   []string
		want   string
		err    error
	}{
		{name: "empty block starts after the gateway", cidr: "10.1.0.0/24", want: "10.1.0.2"},
		{name: "skips used", cidr: "10.1.0.0/24", used: []string{"10.1.0.2", "10.1.0.3"}, want: "10.1.0.4"},
		{name: "continues after the cursor", cidr: "10.1.0.0/24", cursor: "10.1.0.9", used: []string{"10.1.0.2"}, want: "10.1.0.10"},
		{name: "a released address is not reused before the others", cidr: "10.1.0.0/24", cursor: "10.1.0.5", used: []string{"10.1.0.2", "10.1.0.3", "10.1.0.4"}, want: "10.1.0.6"},
		{name: "wraps at the end, skipping broadcast", cidr: "10.1.0.0/24", cursor: "10.1.0.254", want: "10.1.0.2"},
		{name: "wraps past used at the start", cidr: "10.1.0.0/24", cursor: "10.1.0.253", used: []string{"10.1.0.254", "10.1.0.2"}, want: "10.1.0.3"},
		{name: "cursor on the broadcast address starts over", cidr: "10.1.0.0/24", cursor: "10.1.0.255", want: "10.1.0.2"},
		{name: "cursor outside the block starts over", cidr: "10.1.0.0/24", cursor: "10.9.0.7", want: "10.1.0.2"},
		{name: "cursor on the gateway starts over", cidr: "10.1.0.0/24", cursor: "10.1.0.1", want: "10.1.0.2"},
		{name: "used outside the block is ignored", cidr: "10.1.0.0/30", used: []string{"10.2.0.2"}, want: "10.1.0.2"},
		{name: "odd block wraps before its own broadcast", cidr: "10.1.1.0/24", cursor: "10.1.1.254", want: "10.1.1.2"},
		{name: "/30 has one address", cidr: "10.1.0.0/30", cursor: "10.1.0.2", want: "10.1.0.2"},
		{name: "/30 exhausted", cidr: "10.1.0.0/30", used: []string{"10.1.0.2"}, err: ErrExhausted},
		{name: "/29 exhausted whatever the cursor", cidr: "10.1.0.0/29", cursor: "10.1.0.4", used: []string{"10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"}, err: ErrExhausted},
		{name: "/29 last free address before the cursor", cidr: "10.1.0.0/29", cursor: "10.1.0.4", used: []string{"10.1.0.2", "10.1.0.4", "10.1.0.5", "10.1.0.6"}, want: "10.1.0.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cursor netip.Addr
			if tc.cursor != "" {
				cursor = netip.MustParseAddr(tc.cursor)
			}
			got, err := mustBlock(t, tc.cidr).Next(cursor, addrs(tc.used...))
			if !errors.Is(err, tc.err) {
				t.Fatalf("Next() error = %v, want %v", err, tc.err)
			}
			if tc.err == nil && got != netip.MustParseAddr(tc.want) {
				t.Errorf("Next() = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	b := mustBlock(t, "10.1.0.0/24")
	used := addrs("10.1.0.7")
	for _, tc := range []struct {
		addr string
		err  error
	}{
		{addr: "10.1.0.8"},
		{addr: "10.1.0.7", err: ErrInUse},
		{addr: "10.1.0.0", err: ErrReserved},
		{addr: "10.1.0.1", err: ErrReserved},
		{addr: "10.1.0.255", err: ErrReserved},
		{addr: "10.1.1.8", err: ErrOutsideBlock},
		{addr: "10.0.255.255", err: ErrOutsideBlock},
		{addr: "fd00::8", err: ErrOutsideBlock},
	} {
		if err := b.Check(netip.MustParseAddr(tc.addr), used); !errors.Is(err, tc.err) {
			t.Errorf("Check(%s) = %v, want %v", tc.addr, err, tc.err)
		}
	}
}

// TestNextHandsOutEveryAddressOnce allocates a whole block the way the secondary network
// does, each address marked used once handed out, and releases some in between: no address
// is handed out twice while in use, and every one is handed out before exhaustion.
func TestNextHandsOutEveryAddressOnce(t *testing.T) {
	b := mustBlock(t, "10.1.0.0/26")
	used := map[netip.Addr]bool{}
	var cursor netip.Addr
	for i := 0; ; i++ {
		a, err := b.Next(cursor, used)
		if errors.Is(err, ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Check(a, used); err != nil {
			t.Fatalf("Next handed out %s: %v", a, err)
		}
		used[a], cursor = true, a
		if i == 10 {
			delete(used, netip.MustParseAddr("10.1.0.5")) // a pod went away
		}
	}
	if len(used) != b.Size() {
		t.Fatalf("exhausted with %d addresses in use, want all %d", len(used), b.Size())
	}
}

// FuzzNext checks Next's contract for any block, cursor and set of used addresses: what it
// returns is assignable and free, and it reports exhaustion only when nothing is.
func FuzzNext(f *testing.F) {
	f.Add(uint32(0x0a010000), uint8(24), uint32(0x0a010005), []byte{2, 3, 4})
	f.Add(uint32(0x0a010000), uint8(30), uint32(0), []byte{2})
	f.Add(uint32(0x0a010000), uint8(29), uint32(0x0a010006), []byte{2, 3, 4, 5, 6})
	f.Fuzz(func(t *testing.T, base uint32, bits uint8, cursor uint32, usedLow []byte) {
		bits = 24 + bits%7 // /24 ... /30: small enough to check exhaustion exhaustively
		p := netip.PrefixFrom(fromUint32(base), int(bits)).Masked()
		b, err := NewBlock(p)
		if err != nil {
			t.Fatal(err)
		}
		used := map[netip.Addr]bool{}
		for _, low := range usedLow {
			used[fromUint32(toUint32(p.Addr())|uint32(low))] = true
		}
		a, err := b.Next(fromUint32(cursor), used)
		if errors.Is(err, ErrExhausted) {
			for x := b.Gateway().Next(); p.Contains(x); x = x.Next() {
				if b.Check(x, used) == nil {
					t.Fatalf("exhausted, but %s is free", x)
				}
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Check(a, used); err != nil {
			t.Fatalf("Next(%s) = %s: %v", fromUint32(cursor), a, err)
		}
	})
}
