package kernel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"

	"sigs.k8s.io/knftables"

	"github.com/octopus-mcs/octopus/internal/datapath/owner"
)

// NFT is the one nftables table a driver owns: the TCP MSS clamp on the forward path and,
// optionally, per-peer byte counters on the underlay (for drivers that have none of their own).
type NFT struct {
	nft    knftables.Interface
	device string
}

// Counted is a peer whose underlay traffic the table counts.
type Counted struct {
	Cluster    string
	Remote     netip.Addr // the peer's underlay address
	RemotePort uint16     // UDP port packets to the peer go to
	LocalPort  uint16     // UDP port packets from the peer arrive at
}

const (
	chainForward = "forward"
	chainInput   = "input"
	chainOutput  = "output"
)

// NewNFT drives the real nft binary for device's table in the current network namespace.
func NewNFT(device string) (*NFT, error) {
	nft, err := knftables.New(knftables.InetFamily, owner.TunnelNFTTablePrefix+device)
	if err != nil {
		return nil, fmt.Errorf("preparing nftables (is the nft binary installed? hack/install-deps.sh installs it): %w", err)
	}
	return &NFT{nft: nft, device: device}, nil
}

// NewNFTWith uses nft, e.g. knftables.NewFake in tests.
func NewNFTWith(nft knftables.Interface, device string) *NFT { return &NFT{nft: nft, device: device} }

// Sync makes the table clamp TCP MSS for a tunnel of the given MTU, and count exactly the
// given peers (nil: no counter chains at all), in one transaction.
func (n *NFT) Sync(ctx context.Context, mtu int, counted []Counted) error {
	existing, err := n.nft.List(ctx, "counters")
	if err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("listing the counters of table %s: %w", owner.TunnelNFTTablePrefix+n.device, err)
	}
	tx := n.nft.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("octopus tunnel " + n.device + ": MSS clamp and peer counters")})
	// add-then-flush: the chain exists afterwards whatever was there, and holds only our rules.
	tx.Add(&knftables.Chain{Name: chainForward, Type: knftables.PtrTo(knftables.FilterType),
		Hook: knftables.PtrTo(knftables.ForwardHook), Priority: knftables.PtrTo(knftables.ManglePriority)})
	tx.Flush(&knftables.Chain{Name: chainForward})
	// Clamp both directions: SYNs leaving through the tunnel, and SYN-ACKs of connections
	// opened from the other side whose peer may not clamp (an older or foreign gateway).
	for _, dir := range []string{"oifname", "iifname"} {
		for _, f := range []struct {
			nfproto string
			hdr     int
		}{{"ipv4", 40}, {"ipv6", 60}} {
			mss := mtu - f.hdr
			tx.Add(&knftables.Rule{Chain: chainForward, Rule: knftables.Concat(
				dir, fmt.Sprintf("%q", n.device), "meta nfproto", f.nfproto,
				"tcp flags syn / syn,rst tcp option maxseg size >", mss,
				"tcp option maxseg size set", mss)})
		}
	}
	if counted != nil {
		for _, c := range []struct {
			name string
			hook knftables.BaseChainHook
		}{{chainInput, knftables.InputHook}, {chainOutput, knftables.OutputHook}} {
			tx.Add(&knftables.Chain{Name: c.name, Type: knftables.PtrTo(knftables.FilterType),
				Hook: knftables.PtrTo(c.hook), Priority: knftables.PtrTo(knftables.FilterPriority)})
			tx.Flush(&knftables.Chain{Name: c.name})
		}
		want := map[string]bool{}
		for _, c := range counted {
			rx, tx2 := CounterNames(c.Cluster)
			want[rx], want[tx2] = true, true
			ip := "ip"
			if c.Remote.Is6() {
				ip = "ip6"
			}
			tx.Add(&knftables.Counter{Name: rx})
			tx.Add(&knftables.Counter{Name: tx2})
			tx.Add(&knftables.Rule{Chain: chainInput, Rule: knftables.Concat(
				ip, "saddr", c.Remote, "udp dport", c.LocalPort, "counter name", fmt.Sprintf("%q", rx))})
			tx.Add(&knftables.Rule{Chain: chainOutput, Rule: knftables.Concat(
				ip, "daddr", c.Remote, "udp dport", c.RemotePort, "counter name", fmt.Sprintf("%q", tx2))})
		}
		// The chains were flushed above, so no rule references a stale counter any more.
		for _, name := range existing {
			if !want[name] {
				tx.Delete(&knftables.Counter{Name: name})
			}
		}
	}
	if err := n.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("writing nftables table %s: %w", owner.TunnelNFTTablePrefix+n.device, err)
	}
	return nil
}

// Counters returns the bytes counted per counter name.
func (n *NFT) Counters(ctx context.Context) (map[string]uint64, error) {
	cs, err := n.nft.ListCounters(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the counters of table %s: %w", owner.TunnelNFTTablePrefix+n.device, err)
	}
	out := make(map[string]uint64, len(cs))
	for _, c := range cs {
		if c.Bytes != nil {
			out[c.Name] = *c.Bytes
		}
	}
	return out, nil
}

// Delete removes the table; a table that is already gone is fine.
func (n *NFT) Delete(ctx context.Context) error {
	tx := n.nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := n.nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("deleting nftables table %s: %w", owner.TunnelNFTTablePrefix+n.device, err)
	}
	return nil
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// CounterNames are the rx and tx counter names of a peer. A hash of the cluster ID keeps them
// unique and stable when sanitising or truncating a long or odd ID would not.
func CounterNames(cluster string) (rx, tx string) {
	sum := sha256.Sum256([]byte(cluster))
	readable := unsafeName.ReplaceAllString(cluster, "_")
	if len(readable) > 24 {
		readable = readable[:24]
	}
	suffix := readable + "-" + hex.EncodeToString(sum[:4])
	return "rx-" + suffix, "tx-" + suffix
}
