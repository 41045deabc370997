package ipam

import (
	"fmt"
	"math/big"
	"net/netip"
)

// Range is the inclusive range of addresses First..Last, of one IP family. Globalnet hands
// out egress addresses as ranges: a block of N addresses need not be a power of two, and
// nftables translates to a range directly.
type Range struct {
	First, Last netip.Addr
}

// RangeOf returns the range holding exactly the addresses of p.
func RangeOf(p netip.Prefix) Range {
	p = p.Masked()
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(b)
	return Range{First: p.Addr(), Last: last}
}

// Validate checks that the range is non-empty, of one family, and First <= Last.
func (r Range) Validate() error {
	switch {
	case !r.First.IsValid() || !r.Last.IsValid():
		return fmt.Errorf("range %s: both ends must be set", r)
	case r.First.Is4() != r.Last.Is4():
		return fmt.Errorf("range %s: both ends must be of one IP family", r)
	case r.Last.Less(r.First):
		return fmt.Errorf("range %s: the last address comes before the first", r)
	}
	return nil
}

// Contains reports whether a is in the range.
func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() == r.First.Is4() && !a.Less(r.First) && !r.Last.Less(a)
}

// Overlaps reports whether the two ranges share an address.
func (r Range) Overlaps(o Range) bool {
	return r.First.Is4() == o.First.Is4() && !r.Last.Less(o.First) && !o.Last.Less(r.First)
}

// Within reports whether every address of the range is in p.
func (r Range) Within(p netip.Prefix) bool { return p.Contains(r.First) && p.Contains(r.Last) }

// Len is the number of addresses in the range, capped at 1<<63 - 1 (huge IPv6 ranges).
func (r Range) Len() uint64 {
	n := new(big.Int).Sub(addrInt(r.Last), addrInt(r.First))
	n.Add(n, big.NewInt(1))
	if !n.IsUint64() {
		return 1<<63 - 1
	}
	return n.Uint64()
}

// String is "first-last", the form nftables reads.
func (r Range) String() string { return r.First.String() + "-" + r.Last.String() }

// Add returns a+n; ok is false when that is beyond the family's last address.
func Add(a netip.Addr, n uint64) (netip.Addr, bool) {
	sum := addrInt(a)
	sum.Add(sum, new(big.Int).SetUint64(n))
	b := sum.Bytes()
	size := a.BitLen() / 8
	if len(b) > size {
		return netip.Addr{}, false
	}
	buf := make([]byte, size)
	copy(buf[size-len(b):], b)
	out, _ := netip.AddrFromSlice(buf)
	return out, true
}

// Offset returns b-a, the position of b counted from a (both of one family, a <= b).
func Offset(a, b netip.Addr) uint64 {
	d := new(big.Int).Sub(addrInt(b), addrInt(a))
	if d.Sign() < 0 || !d.IsUint64() {
		return 1<<63 - 1
	}
	return d.Uint64()
}

func addrInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }
