package crd_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/config/crd"
)

func icRoute(name, prefix, target, hop string) func() client.Object {
	return func() client.Object {
		return &v1alpha1.InterconnectRoute{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1alpha1.InterconnectRouteSpec{Prefix: prefix, TargetCluster: target, NextHop: hop},
		}
	}
}

// TestInterconnectRouteSchemaValidation sends each kind of bad manual route to a real API
// server serving the member's generated CRDs: every rule refuses its input with a message
// naming the field and the fix, and the valid routes (by cluster, by next hop) pass.
func TestInterconnectRouteSchemaValidation(t *testing.T) {
	c := servingCRDs(t, crd.Member)
	for _, tt := range []struct {
		name    string
		obj     func() client.Object
		wantErr string // empty: must be accepted
	}{
		{"to a cluster", icRoute("to-west", "10.113.0.0/24", "west", ""), ""},
		{"by next hop", icRoute("by-hop", "10.114.0.0/16", "", "169.254.100.2"), ""},
		{"neither target nor next hop", icRoute("neither", "10.113.0.0/24", "", ""),
			"spec: Invalid value: set exactly one of targetCluster (a cluster ID) or nextHop (the remote AZ's transit port address)"},
		{"both target and next hop", icRoute("both", "10.113.0.0/24", "west", "169.254.100.2"), "set exactly one of targetCluster"},
		{"prefix not a CIDR", icRoute("no-cidr", "10.113.0.0", "west", ""),
			`spec.prefix: Invalid value: "10.113.0.0": prefix must be an IPv4 CIDR such as 10.113.0.0/24`},
		{"prefix IPv6", icRoute("v6", "fd00:1::/64", "west", ""), "prefix must be an IPv4 CIDR"},
		{"prefix with host bits", icRoute("unmasked", "10.113.0.5/24", "west", ""),
			`spec.prefix: Invalid value: "10.113.0.5/24": prefix must be masked: write the network address`},
		{"prefix missing", icRoute("empty", "", "west", ""), "spec.prefix"},
		{"target not a cluster ID", icRoute("bad-target", "10.113.0.0/24", "West_1", ""),
			`spec.targetCluster: Invalid value: "West_1": targetCluster must be a cluster ID: a DNS label`},
		{"next hop not an IP", icRoute("bad-hop", "10.113.0.0/24", "", "west.example"),
			`spec.nextHop: Invalid value: "west.example": nextHop must be an IPv4 address, the remote AZ's transit port address`},
		{"next hop IPv6", icRoute("v6-hop", "10.113.0.0/24", "", "fd00::2"), "nextHop must be an IPv4 address"},
	} {
		t.Run(tt.name, func(t *testing.T) { checkAdmission(t, c, tt.obj(), tt.wantErr) })
	}
}
