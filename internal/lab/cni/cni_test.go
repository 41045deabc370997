package cni

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct{ in, want, wantErr string }{
		{in: "", want: Bridge},
		{in: "bridge", want: Bridge},
		{in: "flannel", want: Flannel},
		{in: "calico", wantErr: `CNI "calico": want bridge`},
		{in: "Flannel", wantErr: `CNI "Flannel"`},
	} {
		got, err := Validate(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Validate(%q) = %q, %v, want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Validate(%q) = %q, %v, want %q", tc.in, got, err, tc.want)
		}
	}
}

// decode unmarshals a rendered configuration for comparison.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	return got
}

func TestBridgeConfig(t *testing.T) {
	v4, v6 := netip.MustParsePrefix("10.1.2.7/24"), netip.MustParsePrefix("2001:db8:101:2::/64")
	ipam := func(ranges, routes []any) map[string]any {
		return map[string]any{
			"cniVersion": "1.0.0", "name": "octopus-lab",
			"plugins": []any{map[string]any{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type": "host-local", "ranges": ranges, "routes": routes, "dataDir": "/lab/nodes/n1/cni/networks",
				},
			}},
		}
	}
	subnet := func(s string) []any { return []any{map[string]any{"subnet": s}} }
	dst := func(s string) map[string]any { return map[string]any{"dst": s} }
	for _, tc := range []struct {
		name  string
		cidrs []netip.Prefix
		want  map[string]any // nil: refused
	}{
		{"ipv4", []netip.Prefix{v4}, ipam([]any{subnet("10.1.2.0/24")}, []any{dst("0.0.0.0/0")})},
		{"dual", []netip.Prefix{v4, v6}, ipam([]any{subnet("10.1.2.0/24"), subnet("2001:db8:101:2::/64")},
			[]any{dst("0.0.0.0/0"), dst("::/0")})},
		{"ipv6 alone", []netip.Prefix{v6}, nil},
		{"ipv6 first", []netip.Prefix{v6, v4}, nil},
		{"two ipv4", []netip.Prefix{v4, v4}, nil},
		{"none", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := BridgeConfig(tc.cidrs, "/lab/nodes/n1/cni/networks")
			if tc.want == nil {
				if err == nil {
					t.Fatalf("%v accepted:\n%s", tc.cidrs, b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, decode(t, b)); diff != "" {
				t.Errorf("bridge configuration (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFlannelConfig checks the flannel plugin's configuration: flanneld's subnet file, and a
// bridge delegate that masquerades nothing (the plugin would otherwise turn ipMasq on, since
// flanneld runs with --ip-masq=false).
func TestFlannelConfig(t *testing.T) {
	b, err := FlannelConfig("/lab/nodes/n1/flannel/subnet.env", "/lab/nodes/n1/cni/flannel")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"cniVersion": "0.3.1", "name": "octopus-lab",
		"plugins": []any{map[string]any{
			"type": "flannel", "subnetFile": "/lab/nodes/n1/flannel/subnet.env", "dataDir": "/lab/nodes/n1/cni/flannel",
			"delegate": map[string]any{"hairpinMode": true, "isDefaultGateway": true, "ipMasq": false},
		}},
	}
	if diff := cmp.Diff(want, decode(t, b)); diff != "" {
		t.Errorf("flannel configuration (-want +got):\n%s", diff)
	}
	if _, err := FlannelConfig("", "/x"); err == nil {
		t.Error("no subnet file was accepted")
	}
}

func TestFlannelNetConf(t *testing.T) {
	b, err := FlannelNetConf(netip.MustParsePrefix("10.1.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"Network": "10.1.0.0/16", "EnableNFTables": true, "Backend": map[string]any{"Type": "vxlan"}}
	if diff := cmp.Diff(want, decode(t, b)); diff != "" {
		t.Errorf("net-conf (-want +got):\n%s", diff)
	}
	if _, err := FlannelNetConf(netip.Prefix{}); err == nil {
		t.Error("no cluster pod CIDR was accepted")
	}
}

func TestFlanneldArgs(t *testing.T) {
	got := FlanneldArgs(FlanneldFiles{Kubeconfig: "/k", NetConf: "/n", SubnetFile: "/s"}, "172.16.1.2")
	for _, want := range []string{"--kube-subnet-mgr", "--kubeconfig-file=/k", "--net-config-path=/n", "--subnet-file=/s", "--iface=172.16.1.2", "--ip-masq=false"} {
		if !slices.Contains(got, want) {
			t.Errorf("flanneld args %q lack %q", got, want)
		}
	}
}

func TestFlannelRBAC(t *testing.T) {
	role, binding := FlannelRBAC()
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != FlannelGroup {
		t.Errorf("binding %+v does not bind role %s to group %s", binding, role.Name, FlannelGroup)
	}
	var patchesStatus bool
	for _, r := range role.Rules {
		patchesStatus = patchesStatus || slices.Contains(r.Resources, "nodes/status") && slices.Contains(r.Verbs, "patch")
		if slices.Contains(r.Verbs, "*") || slices.Contains(r.Verbs, "delete") {
			t.Errorf("rule %+v grants more than flanneld needs", r)
		}
	}
	if !patchesStatus {
		t.Errorf("role %+v lets flanneld not patch its Node's status (its annotations)", role.Rules)
	}
}
