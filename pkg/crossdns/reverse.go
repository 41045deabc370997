package crossdns

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// The roots of the reverse trees (RFC 1035 §3.5, RFC 3596 §2.5).
const (
	arpaV4 = "in-addr.arpa."
	arpaV6 = "ip6.arpa."
)

// ReverseZone reports whether zone (fully qualified, lower case) is a reverse zone the index
// can answer PTR in: in-addr.arpa., ip6.arpa., or a zone of whole labels below one of them,
// such as 100.10.in-addr.arpa.
func ReverseZone(zone string) bool {
	_, ok := reversePrefix(zone)
	return ok
}

// lookupReverse answers qname in the reverse zone zone: the PTR records of ready headless
// endpoints (§2.4.3). ClusterSetIPs have none here: each is the ClusterIP of the import's derived
// Service, which the cluster's own DNS already answers PTR for (§2.3.3, Limitations). The
// caller holds the read lock.
func (ix *Index) lookupReverse(zone, qname string, qtype uint16) Result {
	if qname == zone && (qtype == dns.TypeSOA || qtype == dns.TypeANY) {
		return Result{Rcode: dns.RcodeSuccess, Answer: []dns.RR{ix.soa(zone, ix.serial)}}
	}
	prefix, ok := reversePrefix(qname)
	switch {
	case !ok:
		return nameError
	case prefix.IsSingleIP():
		if target := ix.ptrTarget(prefix.Addr()); target != "" {
			if qtype != dns.TypePTR && qtype != dns.TypeANY {
				return noData
			}
			return Result{Rcode: dns.RcodeSuccess, Answer: []dns.RR{&dns.PTR{Hdr: ix.hdr(qname, dns.TypePTR), Ptr: target}}}
		}
	case ix.anyAddressIn(prefix):
		return noData // an empty non-terminal above a PTR record (RFC 8020)
	}
	if qname == zone {
		return noData // the apex holds only the SOA
	}
	return nameError
}

// ptrTarget returns the name of the ready endpoint at addr, "" for none. An address that two
// services name (overlapping clusters) gets the first name in order: one PTR per address
// (§2.4.3, Limitations), the same one on every replica.
func (ix *Index) ptrTarget(addr netip.Addr) string {
	target := ""
	for _, name := range ix.ptrs[addr] {
		if target == "" || name < target {
			target = name
		}
	}
	return target
}

// anyAddressIn reports whether an address with a PTR record lies in prefix. It walks every
// address: only queries for the partial names above PTR records, which resolvers rarely send,
// come here.
func (ix *Index) anyAddressIn(prefix netip.Prefix) bool {
	for addr := range ix.ptrs {
		if prefix.Contains(addr) {
			return true
		}
	}
	return false
}

// reversePrefix returns the addresses a name (fully qualified, lower case) in the reverse tree
// stands for: a single address for a full name (4 labels under in-addr.arpa., 32 nibbles under
// ip6.arpa.), a shorter prefix for the names above it. Labels must be canonical: decimal octets
// without leading zeros, single hexadecimal digits.
func reversePrefix(name string) (netip.Prefix, bool) {
	var labels []string
	v4 := true
	switch {
	case name == arpaV4:
	case name == arpaV6:
		v4 = false
	case strings.HasSuffix(name, "."+arpaV4):
		labels = strings.Split(strings.TrimSuffix(name, "."+arpaV4), ".")
	case strings.HasSuffix(name, "."+arpaV6):
		labels = strings.Split(strings.TrimSuffix(name, "."+arpaV6), ".")
		v4 = false
	default:
		return netip.Prefix{}, false
	}
	if v4 {
		if len(labels) > 4 {
			return netip.Prefix{}, false
		}
		var b [4]byte
		for i, l := range labels {
			v, err := strconv.Atoi(l)
			if err != nil || v < 0 || v > 255 || strconv.Itoa(v) != l {
				return netip.Prefix{}, false
			}
			b[len(labels)-1-i] = byte(v) // the most significant octet is the label nearest the root
		}
		return netip.PrefixFrom(netip.AddrFrom4(b), 8*len(labels)), true
	}
	if len(labels) > 32 {
		return netip.Prefix{}, false
	}
	var b [16]byte
	for i, l := range labels {
		v, err := strconv.ParseUint(l, 16, 4)
		if len(l) != 1 || err != nil {
			return netip.Prefix{}, false
		}
		nibble := len(labels) - 1 - i // 0 is the most significant
		b[nibble/2] |= byte(v) << (4 * (1 - nibble%2))
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), 4*len(labels)), true
}
