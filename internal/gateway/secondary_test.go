package gateway

import (
	"net/netip"
	"testing"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
)

func TestSecondaryBlock(t *testing.T) {
	cluster := func(a v1alpha1.Addressing, cidr string) *v1alpha1.Cluster {
		return &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{ClusterID: "a", Addressing: a, SecondaryCIDR: cidr}}
	}
	tests := []struct {
		name      string
		c         *v1alpha1.Cluster
		secondary bool
		block, hc string
		wantErr   bool
	}{
		{name: "secondary: the block and its first host", c: cluster(v1alpha1.AddressingSecondary, "10.113.0.0/16"), secondary: true, block: "10.113.0.0/16", hc: "10.113.0.1"},
		{name: "direct has a block but does not use it", c: cluster(v1alpha1.AddressingDirect, "10.113.0.0/16")},
		{name: "unset is direct", c: cluster("", "10.113.0.0/16")},
		{name: "globalnet", c: cluster(v1alpha1.AddressingGlobalnet, "10.113.0.0/16")},
		{name: "not a CIDR", c: cluster(v1alpha1.AddressingSecondary, "10.113.0.0"), wantErr: true},
		{name: "missing", c: cluster(v1alpha1.AddressingSecondary, ""), wantErr: true},
		{name: "host bits", c: cluster(v1alpha1.AddressingSecondary, "10.113.0.1/16"), wantErr: true},
		{name: "IPv6", c: cluster(v1alpha1.AddressingSecondary, "fd00::/64"), wantErr: true},
		{name: "too small for a gateway and a pod", c: cluster(v1alpha1.AddressingSecondary, "10.113.0.0/31"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			block, hc, ok, err := secondaryBlock(tt.c)
			if (err != nil) != tt.wantErr || ok != tt.secondary {
				t.Fatalf("secondary %v, error %v", ok, err)
			}
			if !ok {
				return
			}
			if block != netip.MustParsePrefix(tt.block) || hc != netip.MustParseAddr(tt.hc) {
				t.Fatalf("block %s, health check %s; want %s, %s", block, hc, tt.block, tt.hc)
			}
		})
	}
}
