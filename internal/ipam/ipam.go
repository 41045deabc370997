// Package ipam carves per-cluster blocks out of the hub's address pools and checks ranges for
// overlap. It is pure logic: where the allocations are recorded is the caller's business.
package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// ErrPoolExhausted means every block of the pool is taken.
var ErrPoolExhausted = errors.New("address pool exhausted")

// Pool is a range from which each cluster gets one block of BlockBits prefix length.
type Pool struct {
	CIDR      netip.Prefix
	BlockBits int
}

// ParsePool validates a pool given as a CIDR string and a per-cluster prefix length.
func ParsePool(cidr string, blockBits int) (Pool, error) {
	p, err := ParsePrefix(cidr)
	if err != nil {
		return Pool{}, err
	}
	pool := Pool{CIDR: p, BlockBits: blockBits}
	return pool, pool.Validate()
}

// Validate checks that the pool holds at least one block.
func (p Pool) Validate() error {
	if !p.CIDR.IsValid() {
		return errors.New("pool CIDR is not set")
	}
	if p.BlockBits < p.CIDR.Bits() || p.BlockBits > p.CIDR.Addr().BitLen() {
		return fmt.Errorf("per-cluster prefix length /%d must be between the pool's /%d and /%d", p.BlockBits, p.CIDR.Bits(), p.CIDR.Addr().BitLen())
	}
	return nil
}

// Size is the number of blocks in the pool, capped at 1<<20 (no pool needs more clusters).
func (p Pool) Size() int {
	shift := p.BlockBits - p.CIDR.Bits()
	if shift > 20 {
		shift = 20
	}
	return 1 << shift
}

// Block returns the i-th block of the pool.
func (p Pool) Block(i int) (netip.Prefix, error) {
	if i < 0 || i >= p.Size() {
		return netip.Prefix{}, fmt.Errorf("block %d is outside pool %s", i, p.CIDR)
	}
	addr := p.CIDR.Addr().AsSlice()
	// Add i << (bitlen - BlockBits) to the base address, big-endian, byte by byte.
	offsetBits := p.CIDR.Addr().BitLen() - p.BlockBits
	carry := uint64(i)
	bytePos := len(addr) - 1 - offsetBits/8
	carry <<= offsetBits % 8
	for ; bytePos >= 0 && carry > 0; bytePos-- {
		sum := uint64(addr[bytePos]) + carry&0xff
		addr[bytePos] = byte(sum)
		carry = carry>>8 + sum>>8
	}
	a, _ := netip.AddrFromSlice(addr)
	return netip.PrefixFrom(a, p.BlockBits), nil
}

// Candidates returns, in order, the blocks of the pool that overlap none of used.
func (p Pool) Candidates(used []netip.Prefix) []netip.Prefix {
	var free []netip.Prefix
	for i := 0; i < p.Size(); i++ {
		b, err := p.Block(i)
		if err != nil {
			break
		}
		if _, hit := FirstOverlap(b, used); !hit {
			free = append(free, b)
		}
	}
	return free
}

// ParsePrefix parses a CIDR and insists it is in canonical form, because "10.1.2.3/16" is almost
// always a typo for "10.1.0.0/16" and silently masking it would hide the mistake.
func ParsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/16: %w", s, err)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set; did you mean %s?", s, p.Masked())
	}
	return p, nil
}

// ParsePrefixes parses each CIDR with ParsePrefix.
func ParsePrefixes(ss []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		p, err := ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// FirstOverlap returns the first prefix of others that shares an address with p.
func FirstOverlap(p netip.Prefix, others []netip.Prefix) (netip.Prefix, bool) {
	for _, o := range others {
		if p.Overlaps(o) {
			return o, true
		}
	}
	return netip.Prefix{}, false
}

// SortPrefixes returns a sorted copy of ps without duplicates: by address, then by prefix
// length. Desired states are compared and written in this order, so that the same set of
// prefixes always reads and diffs the same.
func SortPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}

// SameFamily returns the first two prefixes of ps of one address family. A cluster's pod and
// service CIDRs are at most one per family (the Cluster API's rule): every consumer routes,
// checks and NATs them per family, and Kubernetes itself takes one range per family.
func SameFamily(ps []netip.Prefix) (a, b netip.Prefix, found bool) {
	for i, p := range ps {
		for _, q := range ps[i+1:] {
			if p.Addr().Is4() == q.Addr().Is4() {
				return p, q, true
			}
		}
	}
	return netip.Prefix{}, netip.Prefix{}, false
}
