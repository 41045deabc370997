package dnsconfig

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ArpaZones returns the reverse zones (RFC 1035 §3.5, RFC 3596 §2.5) that hold the PTR names
// of the addresses in prefixes, sorted and without duplicates: whole labels only, so an IPv4
// prefix is widened or split to octet boundaries (a /20 gives its sixteen /24 zones, a /26 the
// /24 around it) and an IPv6 prefix to nibble boundaries. IPv4 prefixes shorter than /8 and
// IPv6 ones shorter than /16 are left out: their zones would take over reverse lookups far
// beyond any cluster's addresses.
func ArpaZones(prefixes []netip.Prefix) []string {
	var out []string
	for _, p := range prefixes {
		p = p.Masked()
		step, limit, minBits := 8, 24, 8 // IPv4: octets, at most three of them
		if p.Addr().Is6() {
			step, limit, minBits = 4, 124, 16 // nibbles
		}
		if !p.IsValid() || p.Bits() < minBits {
			continue
		}
		bits := min((p.Bits()+step-1)/step*step, limit)
		if bits < p.Bits() {
			// Longer than the deepest zone we name: the zone around it.
			p = netip.PrefixFrom(p.Addr(), bits).Masked()
		}
		// Split into 2^(bits-p.Bits()) zones of bits each (at most 2^(step-1)).
		n := 1 << (bits - p.Bits())
		addr := p.Addr()
		for range n {
			out = append(out, arpaZone(netip.PrefixFrom(addr, bits)))
			addr = nextPrefixAddr(addr, bits)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// arpaZone names the reverse zone of p, whose length is a whole number of labels.
func arpaZone(p netip.Prefix) string {
	b := p.Addr().AsSlice()
	var labels []string
	if p.Addr().Is4() {
		for i := p.Bits()/8 - 1; i >= 0; i-- {
			labels = append(labels, strconv.Itoa(int(b[i])))
		}
		return strings.Join(append(labels, "in-addr", "arpa"), ".")
	}
	for i := p.Bits()/4 - 1; i >= 0; i-- {
		nibble := b[i/2] >> 4
		if i%2 == 1 {
			nibble = b[i/2] & 0xf
		}
		labels = append(labels, strconv.FormatUint(uint64(nibble), 16))
	}
	return strings.Join(append(labels, "ip6", "arpa"), ".")
}

// nextPrefixAddr returns the first address of the prefix of length bits after the one at addr.
func nextPrefixAddr(addr netip.Addr, bits int) netip.Addr {
	b := addr.AsSlice()
	// Add 1 at bit position bits-1 (counting from the most significant bit).
	i, carry := (bits-1)/8, byte(1)<<(7-(bits-1)%8)
	for ; i >= 0; i-- {
		sum := uint16(b[i]) + uint16(carry)
		b[i] = byte(sum)
		if sum < 256 {
			break
		}
		carry = 1
	}
	next, _ := netip.AddrFromSlice(b)
	return next
}
