package main

import (
	"strings"
	"testing"
)

// TestMasterGlobalLayout: --global-cidr is optional (no layout without it), is laid out as the
// agent's allocator lays out the Cluster's spec (the pool after the egress range), and a bad
// value is refused naming both flags.
func TestMasterGlobalLayout(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cidr       string
		egressSize int32
		wantPool   string // "" for no layout
		wantErr    string
	}{
		{name: "none", cidr: ""},
		{name: "the default egress range", cidr: "242.1.0.0/28", wantPool: "242.1.0.8-242.1.0.14"},
		{name: "a larger egress range", cidr: "242.1.0.0/28", egressSize: 12, wantPool: "242.1.0.12-242.1.0.14"},
		{name: "not a CIDR", cidr: "242.1.0.0", wantErr: "--global-cidr \"242.1.0.0\", --global-egress-size 0"},
		{name: "no room for the pool", cidr: "242.1.0.0/28", egressSize: 15, wantErr: "--global-egress-size 15"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := masterOptions{clusterID: "east", globalCIDR: tc.cidr, globalEgressSize: tc.egressSize}
			l, err := o.globalLayout()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("globalLayout() = %v, %v; want an error with %q", l, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if l != nil {
				got = l.Pool.String()
			}
			if got != tc.wantPool {
				t.Errorf("pool %q, want %q", got, tc.wantPool)
			}
		})
	}
}

// TestMasterGlobalPool: --global-pool is optional, must be an IPv4 CIDR and is masked.
func TestMasterGlobalPool(t *testing.T) {
	for _, tc := range []struct{ in, want, wantErr string }{
		{in: "", want: "invalid Prefix"},
		{in: "242.0.0.0/8", want: "242.0.0.0/8"},
		{in: "242.1.2.3/8", want: "242.0.0.0/8"},
		{in: "242.0.0.0", wantErr: `--global-pool "242.0.0.0": want an IPv4 CIDR`},
		{in: "2001:db8::/32", wantErr: "want an IPv4 CIDR"},
	} {
		got, err := masterOptions{globalPool: tc.in}.parseGlobalPool()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseGlobalPool(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("parseGlobalPool(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}
