// Package hostaddr hands out the single addresses of one block, such as a cluster's
// secondary CIDR to its pods. It is pure logic and keeps no state: the caller passes the
// addresses in use (read from wherever they are recorded, the source of truth) on every
// call, so an address can never be handed out twice however often the caller restarts.
package hostaddr

import (
	"errors"
	"fmt"
	"net/netip"
)

// Errors a caller can tell apart with errors.Is, to explain to the user what to change.
var (
	// ErrExhausted means every assignable address of the block is in use.
	ErrExhausted = errors.New("address block exhausted")
	// ErrOutsideBlock means a requested address is not in the block.
	ErrOutsideBlock = errors.New("address outside the block")
	// ErrReserved means a requested address is one the block keeps for itself.
	ErrReserved = errors.New("address reserved")
	// ErrInUse means a requested address is already assigned.
	ErrInUse = errors.New("address in use")
)

// MaxPrefixLen is the longest IPv4 prefix a Block accepts: a /30 has four addresses, of
// which the network, gateway and broadcast addresses leave one to hand out.
const MaxPrefixLen = 30

// Block is a CIDR whose addresses are handed out one by one. Three are reserved: the network
// address and the IPv4 broadcast address (not usable by hosts) and the first host address,
// kept for the network's gateway.
type Block struct {
	prefix netip.Prefix
}

// NewBlock validates p: an IPv4 prefix in canonical form (no host bits) no longer than /30.
// IPv6 blocks are refused for now, because the MAC addresses of the secondary network's
// ports are derived from their IPv4 addresses.
func NewBlock(p netip.Prefix) (Block, error) {
	switch {
	case !p.IsValid():
		return Block{}, errors.New("block is not a valid CIDR")
	case !p.Addr().Is4():
		return Block{}, fmt.Errorf("block %s: only IPv4 blocks are supported", p)
	case p.Masked() != p:
		return Block{}, fmt.Errorf("block %s has host bits set; did you mean %s?", p, p.Masked())
	case p.Bits() > MaxPrefixLen:
		return Block{}, fmt.Errorf("block %s is too small: it needs at least /%d to leave an address after the network, gateway and broadcast addresses", p, MaxPrefixLen)
	}
	return Block{prefix: p}, nil
}

// Prefix is the block's CIDR.
func (b Block) Prefix() netip.Prefix { return b.prefix }

// Gateway is the block's first host address, which is never handed out: it stays free for
// the gateway's own port on the network.
func (b Block) Gateway() netip.Addr { return b.prefix.Addr().Next() }

// Size is the number of assignable addresses: all but the three reserved ones.
func (b Block) Size() int { return 1<<(32-b.prefix.Bits()) - 3 }

// last is the block's broadcast address.
func (b Block) last() netip.Addr {
	return fromUint32(toUint32(b.prefix.Addr()) | (uint32(1)<<(32-b.prefix.Bits()) - 1))
}

func toUint32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func fromUint32(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// reserved reports whether a is the network, gateway or broadcast address.
func (b Block) reserved(a netip.Addr) bool {
	return a == b.prefix.Addr() || a == b.Gateway() || a == b.last()
}

// Check tells whether a may be assigned: in the block, not reserved, not in use.
func (b Block) Check(a netip.Addr, used map[netip.Addr]bool) error {
	switch {
	case !b.prefix.Contains(a):
		return fmt.Errorf("%w: %s is not in %s", ErrOutsideBlock, a, b.prefix)
	case b.reserved(a):
		return fmt.Errorf("%w: %s is the network, gateway or broadcast address of %s", ErrReserved, a, b.prefix)
	case used[a]:
		return fmt.Errorf("%w: %s", ErrInUse, a)
	}
	return nil
}

// Next returns the first assignable address after the cursor that is not in used, wrapping
// round at the end of the block; an invalid cursor, or one outside the block, starts at the
// beginning. Handing out addresses in turn rather than the lowest free one means an address
// just released is reused last: other clusters may still hold connections, DNS answers and
// EndpointSlices that name it. Addresses in used that lie outside the block are ignored.
func (b Block) Next(cursor netip.Addr, used map[netip.Addr]bool) (netip.Addr, error) {
	first, last := b.Gateway().Next(), b.last().Prev()
	start := first
	if b.prefix.Contains(cursor) && cursor.Less(last) && !cursor.Less(first) {
		start = cursor.Next()
	}
	a := start
	for {
		if !used[a] {
			return a, nil
		}
		if a == last {
			a = first
		} else {
			a = a.Next()
		}
		if a == start {
			return netip.Addr{}, fmt.Errorf("%w: all %d addresses of %s are in use", ErrExhausted, b.Size(), b.prefix)
		}
	}
}
