package globalnet_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/globalnet"
	"github.com/octopus-mcs/octopus/internal/ipam"
)

// TestClusterLayout checks that the layout both the allocator and the gateway use takes the
// egress range's size from the Cluster's spec, unset meaning the default 8.
func TestClusterLayout(t *testing.T) {
	rng := func(first, last string) ipam.Range {
		return ipam.Range{First: netip.MustParseAddr(first), Last: netip.MustParseAddr(last)}
	}
	tests := []struct {
		name       string
		cidr       string
		egressSize int32
		wantEgress ipam.Range
		wantPool   ipam.Range
		wantErr    string
	}{
		{name: "unset means 8", cidr: "242.1.0.0/16",
			wantEgress: rng("242.1.0.0", "242.1.0.7"), wantPool: rng("242.1.0.8", "242.1.255.254")},
		{name: "4", cidr: "242.1.0.0/16", egressSize: 4,
			wantEgress: rng("242.1.0.0", "242.1.0.3"), wantPool: rng("242.1.0.4", "242.1.255.254")},
		{name: "32", cidr: "242.1.0.0/24", egressSize: 32,
			wantEgress: rng("242.1.0.0", "242.1.0.31"), wantPool: rng("242.1.0.32", "242.1.0.254")},
		{name: "1 in a /29 the default would not fit", cidr: "242.1.0.0/29", egressSize: 1,
			wantEgress: rng("242.1.0.0", "242.1.0.0"), wantPool: rng("242.1.0.1", "242.1.0.6")},
		{name: "too big for the CIDR", cidr: "242.1.0.0/28", egressSize: 15,
			wantErr: "spec.globalEgressSize 15"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := globalnet.ClusterLayout(v1alpha1.ClusterSpec{
				ClusterID: "east", Addressing: v1alpha1.AddressingGlobalnet, GlobalCIDR: tt.cidr, GlobalEgressSize: tt.egressSize,
			})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ClusterEgress != tt.wantEgress || got.Pool != tt.wantPool {
				t.Fatalf("egress %s, pool %s; want egress %s, pool %s", got.ClusterEgress, got.Pool, tt.wantEgress, tt.wantPool)
			}
		})
	}
}
