package main

import (
	"strings"
	"testing"
	"time"
)

// TestGatewayPortFlags: each wrong flag is refused with an error naming it and saying what
// to pass instead; valid flags make the loop's options.
func TestGatewayPortFlags(t *testing.T) {
	valid := gatewayPortOptions{clusterID: "east", secondaryCIDR: "10.112.0.0/16", bridge: "br-int", mtu: 1400, interval: 10 * time.Second}
	opts, err := valid.options()
	if err != nil {
		t.Fatalf("valid flags refused: %v", err)
	}
	if opts.ClusterID != "east" || opts.CIDR.String() != "10.112.0.0/16" || opts.Node.Bridge != "br-int" || opts.MTU != 1400 || opts.Interval != 10*time.Second {
		t.Errorf("options = %+v", opts)
	}
	for _, tc := range []struct {
		name   string
		change func(*gatewayPortOptions)
		want   []string // all in the error
	}{
		{"no cluster ID", func(o *gatewayPortOptions) { o.clusterID = "" }, []string{"--cluster-id", "kubectl get clusters"}},
		{"cluster ID not a label", func(o *gatewayPortOptions) { o.clusterID = "East_1" }, []string{`--cluster-id "East_1"`, "RFC 1123"}},
		{"no CIDR", func(o *gatewayPortOptions) { o.secondaryCIDR = "" }, []string{"--secondary-cidr", "kubectl get clusters -o wide"}},
		{"CIDR garbled", func(o *gatewayPortOptions) { o.secondaryCIDR = "10.112/16" }, []string{`--secondary-cidr "10.112/16"`}},
		{"CIDR with host bits", func(o *gatewayPortOptions) { o.secondaryCIDR = "10.112.0.1/16" }, []string{"--secondary-cidr", "did you mean 10.112.0.0/16"}},
		{"CIDR too small", func(o *gatewayPortOptions) { o.secondaryCIDR = "10.112.0.0/31" }, []string{"--secondary-cidr", "too small"}},
		{"IPv6 CIDR", func(o *gatewayPortOptions) { o.secondaryCIDR = "fd00::/64" }, []string{"--secondary-cidr", "only IPv4"}},
		{"no bridge", func(o *gatewayPortOptions) { o.bridge = "" }, []string{"--bridge", "br-int"}},
		{"MTU too small", func(o *gatewayPortOptions) { o.mtu = 0 }, []string{"--mtu 0", "1400"}},
		{"MTU too large", func(o *gatewayPortOptions) { o.mtu = 70000 }, []string{"--mtu 70000"}},
		{"interval zero", func(o *gatewayPortOptions) { o.interval = 0 }, []string{"--interval 0s", "positive"}},
		{"interval negative", func(o *gatewayPortOptions) { o.interval = -time.Second }, []string{"--interval -1s"}},
		{"two wrong", func(o *gatewayPortOptions) { o.bridge, o.mtu = "", 0 }, []string{"--bridge", "--mtu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid
			tc.change(&o)
			_, err := o.options()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
