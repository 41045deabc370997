// Package globalip lays out a globalnet cluster's global CIDR and assigns the addresses in it:
// the cluster's egress range, the gateway's health-check address, and the pool from which
// exported services and headless pods get their ingress addresses. It is pure logic: where the
// assignments are recorded (GlobalIngressIP objects) is the caller's business.
package globalip

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"

	"github.com/octopus-mcs/octopus/internal/ipam"
)

// DefaultClusterEgressSize is how many addresses the cluster's egress range has by default:
// enough source addresses (8 × 64k ports) for the connections one cluster opens to each remote
// address, and the size users of Submariner's ClusterGlobalEgressIP know.
const DefaultClusterEgressSize = 8

// Layout is how a cluster's global CIDR is used.
type Layout struct {
	// CIDR is the cluster's global CIDR.
	CIDR netip.Prefix
	// ClusterEgress is the range the cluster's traffic to other clusters leaves with: the
	// first addresses of the CIDR.
	ClusterEgress ipam.Range
	// HealthCheck is the active gateway's health-check address, the last of the CIDR: the
	// default one (the first host of the node's pod CIDR) is the same in every cluster of a
	// fleet with overlapping pod CIDRs, so other gateways could not tell them apart.
	HealthCheck netip.Addr
	// Pool is everything in between: ingress addresses, and the egress ranges of namespaces
	// and pod selectors.
	Pool ipam.Range
}

// NewLayout splits cidr: egressSize addresses of cluster egress (DefaultClusterEgressSize
// when zero), the health-check address, and a pool of at least one address.
func NewLayout(cidr netip.Prefix, egressSize int) (Layout, error) {
	if !cidr.IsValid() {
		return Layout{}, errors.New("no global CIDR")
	}
	if cidr.Masked() != cidr {
		return Layout{}, fmt.Errorf("global CIDR %s has host bits set; did you mean %s?", cidr, cidr.Masked())
	}
	if egressSize == 0 {
		egressSize = DefaultClusterEgressSize
	}
	all := ipam.RangeOf(cidr)
	if egressSize < 0 || all.Len() < uint64(egressSize)+2 {
		return Layout{}, fmt.Errorf("global CIDR %s (%d addresses) cannot hold an egress range of %d, a health-check address and an ingress address",
			cidr, all.Len(), egressSize)
	}
	egressLast, _ := ipam.Add(all.First, uint64(egressSize)-1)
	poolFirst, _ := ipam.Add(egressLast, 1)
	return Layout{
		CIDR:          cidr,
		ClusterEgress: ipam.Range{First: all.First, Last: egressLast},
		HealthCheck:   all.Last,
		Pool:          ipam.Range{First: poolFirst, Last: all.Last.Prev()},
	}, nil
}

// Claim asks for consecutive addresses of the pool.
type Claim struct {
	// Key identifies the claim: "<namespace>/<name>" of the object that needs the addresses.
	// Of two claims with one key only the first counts. A new claim starts looking for room at
	// a place derived from its key, so that one made again under the same key (an unexport and
	// a new export of a service) tends to get its old address back, and a freed address is not
	// the very next one handed out.
	Key string
	// Size is how many consecutive addresses: 1 for an ingress address.
	Size int
	// Held is what the claim was assigned before (as recorded in the API), the zero Range if
	// nothing.
	Held ipam.Range
}

// MaxPool is how many addresses of a pool Assign uses: all of an IPv4 global CIDR up to a /8,
// the first 16 Mi of anything bigger (an IPv6 block).
const MaxPool = 1 << 24

// Assign gives every claim Size consecutive addresses of pool. A claim keeps what it holds if
// that is still inside the pool, of its size, and not held by an earlier claim: callers order
// the claims oldest first, so that of two objects recorded with one address (a split-brain
// or a hand edit) the older keeps it and the younger gets another. The others get free
// addresses. A claim that finds no room (the pool is exhausted) is in unassigned, in claim
// order; nothing is taken from another claim to make room. The result depends only on the
// arguments.
func Assign(pool ipam.Range, claims []Claim) (assigned map[string]ipam.Range, unassigned []string) {
	assigned = map[string]ipam.Range{}
	if pool.Validate() != nil {
		for _, c := range claims {
			unassigned = append(unassigned, c.Key)
		}
		return assigned, unassigned
	}
	used := newBitmap(min(pool.Len(), MaxPool))
	seen := map[string]bool{}
	var pending []Claim
	for _, c := range claims {
		if seen[c.Key] {
			continue
		}
		seen[c.Key] = true
		if c.Size < 1 {
			unassigned = append(unassigned, c.Key)
			continue
		}
		if start, ok := used.offsetOf(pool, c.Held); ok && c.Held.Len() == uint64(c.Size) && used.free(start, uint64(c.Size)) {
			used.set(start, uint64(c.Size))
			assigned[c.Key] = c.Held
			continue
		}
		pending = append(pending, c)
	}
	for _, c := range pending {
		start, ok := used.find(hashOf(c.Key)%used.n, uint64(c.Size))
		if !ok {
			unassigned = append(unassigned, c.Key)
			continue
		}
		used.set(start, uint64(c.Size))
		first, _ := ipam.Add(pool.First, start)
		last, _ := ipam.Add(first, uint64(c.Size)-1)
		assigned[c.Key] = ipam.Range{First: first, Last: last}
	}
	return assigned, unassigned
}

func hashOf(key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return h.Sum64()
}

// bitmap marks the used offsets of a pool of n addresses.
type bitmap struct {
	words []uint64
	n     uint64
	count uint64 // set bits
}

func newBitmap(n uint64) *bitmap { return &bitmap{words: make([]uint64, (n+63)/64), n: n} }

func (b *bitmap) isSet(i uint64) bool { return b.words[i/64]&(1<<(i%64)) != 0 }

// offsetOf returns where r starts in pool, if r lies entirely within the pool's used part.
func (b *bitmap) offsetOf(pool ipam.Range, r ipam.Range) (uint64, bool) {
	if r.Validate() != nil || !pool.Contains(r.First) || !pool.Contains(r.Last) {
		return 0, false
	}
	start := ipam.Offset(pool.First, r.First)
	return start, start+r.Len() <= b.n
}

func (b *bitmap) free(start, size uint64) bool {
	for i := start; i < start+size; i++ {
		if b.isSet(i) {
			return false
		}
	}
	return true
}

func (b *bitmap) set(start, size uint64) {
	for i := start; i < start+size; i++ {
		b.words[i/64] |= 1 << (i % 64)
	}
	b.count += size
}

// find returns the first offset at or after from (wrapping around once) where size addresses
// in a row are free. A range never wraps past the pool's end.
func (b *bitmap) find(from, size uint64) (uint64, bool) {
	if b.n-b.count < size || size > b.n {
		return 0, false
	}
	for scanned := uint64(0); scanned < b.n; {
		i := (from + scanned) % b.n
		if size == 1 && i%64 == 0 && b.words[i/64] == ^uint64(0) {
			scanned += 64 // a full word: skip it at once, which keeps a nearly full pool fast
			continue
		}
		if size == 1 && !b.isSet(i) {
			return i, true
		}
		if size > 1 && i+size <= b.n && b.free(i, size) {
			return i, true
		}
		scanned++
	}
	return 0, false
}
