package lab_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/lab"
	"github.com/octopus-mcs/octopus/internal/lab/cni"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// TestOptionsValidate checks what Up refuses, in the Options' own terms: each problem is an
// *lab.OptionError naming its field, and no message names a flag of a command.
func TestOptionsValidate(t *testing.T) {
	valid := lab.Options{Clusters: 2, GatewaysPerCluster: 1, Dir: "/tmp/lab"}
	for name, tc := range map[string]struct {
		mutate func(*lab.Options)
		// want are the messages, in order; none for valid options.
		want []string
	}{
		"valid":                 {mutate: func(*lab.Options) {}},
		"hub topology":          {mutate: func(o *lab.Options) { o.Topology, o.HubGateways = v1alpha1.TopologyHub, 3 }},
		"four nodes":            {mutate: func(o *lab.Options) { o.GatewaysPerCluster, o.NodesPerCluster = 2, 4 }},
		"no clusters":           {mutate: func(o *lab.Options) { o.Clusters = 0 }, want: []string{"Clusters 0: want 1 to 15"}},
		"no gateways":           {mutate: func(o *lab.Options) { o.GatewaysPerCluster = 0 }, want: []string{"GatewaysPerCluster 0: want 1 to 13"}},
		"every node a gateway":  {mutate: func(o *lab.Options) { o.GatewaysPerCluster, o.NodesPerCluster = 2, 2 }},
		"fewer nodes":           {mutate: func(o *lab.Options) { o.GatewaysPerCluster, o.NodesPerCluster = 3, 2 }, want: []string{"NodesPerCluster 2 is fewer than GatewaysPerCluster 3: give at least 3 nodes"}},
		"one node":              {mutate: func(o *lab.Options) { o.NodesPerCluster = 1 }, want: []string{"NodesPerCluster 1: want at least 2 (the active gateway's node and another)"}},
		"too many nodes":        {mutate: func(o *lab.Options) { o.NodesPerCluster = 14 }, want: []string{"NodesPerCluster 14: want at most 13"}},
		"unknown topology":      {mutate: func(o *lab.Options) { o.Topology = "star" }, want: []string{`Topology "star": want mesh or hub`}},
		"hub gateways, mesh":    {mutate: func(o *lab.Options) { o.HubGateways = 2 }, want: []string{"HubGateways 2: want 1 to 3, with Topology hub (only the hub topology has hub gateways)"}},
		"too many hub gateways": {mutate: func(o *lab.Options) { o.Topology, o.HubGateways = v1alpha1.TopologyHub, 4 }, want: []string{"HubGateways 4: want 1 to 3"}},
		"unknown backend": {
			mutate: func(o *lab.Options) {
				o.Backends = map[string]string{"cluster2": "ipsec", lab.HubName: "ipsec", "cluster1": "vxlan"}
			},
			want: []string{`Backends "ipsec": want wireguard or vxlan (given for cluster2, hub)`},
		},
		"flannel":     {mutate: func(o *lab.Options) { o.CNI = cni.Flannel }},
		"unknown CNI": {mutate: func(o *lab.Options) { o.CNI = "calico" }, want: []string{`CNI "calico": want bridge or flannel`}},
		"mixed":       {mutate: func(o *lab.Options) { o.Clusters, o.OverlappingCIDRs, o.DirectClusters = 3, true, []string{"cluster3"} }},
		"direct clusters without overlap": {
			mutate: func(o *lab.Options) { o.DirectClusters = []string{"cluster2"} },
			want:   []string{"DirectClusters cluster2: a mixed cluster set needs OverlappingCIDRs or SecondaryNetwork"},
		},
		"cluster1 direct": {
			mutate: func(o *lab.Options) { o.OverlappingCIDRs, o.DirectClusters = true, []string{"cluster1"} },
			want:   []string{"DirectClusters cluster1: its CIDRs are the ones the globalnet clusters share"},
		},
		"unknown direct cluster": {
			mutate: func(o *lab.Options) { o.OverlappingCIDRs, o.DirectClusters = true, []string{"cluster3"} },
			want:   []string{"DirectClusters cluster3: not a member cluster; want one of cluster1, cluster2"},
		},
		"unjoined": {mutate: func(o *lab.Options) { o.Unjoined = true }},
		"unjoined with what the lab's join configures": {
			mutate: func(o *lab.Options) {
				o.Unjoined, o.Topology, o.HubGateways = true, v1alpha1.TopologyHub, 1
				o.Backends, o.ComponentProcesses = map[string]string{"cluster1": "vxlan"}, true
			},
			want: []string{"Unjoined with Topology hub: the hub's gateways need the hub", "Unjoined with Backends", "Unjoined with ComponentProcesses"},
		},
		"secondary network": {mutate: func(o *lab.Options) { o.SecondaryNetwork = true }},
		"secondary network with processes": {
			mutate: func(o *lab.Options) { o.SecondaryNetwork, o.ComponentProcesses = true, true },
			want:   []string{"SecondaryNetwork with ComponentProcesses: OVN and its components run only as the member chart's pods"},
		},
		"secondary network, identical CIDRs": {mutate: func(o *lab.Options) { o.SecondaryNetwork, o.OverlappingCIDRs = true, true }},
		"secondary network beside direct clusters": {
			mutate: func(o *lab.Options) {
				o.Clusters, o.SecondaryNetwork, o.OverlappingCIDRs, o.DirectClusters = 4, true, true, []string{"cluster3", "cluster4"}
			},
		},
		"secondary network without octopus-ovn": {
			mutate: func(o *lab.Options) { o.SecondaryNetwork, o.AgentBinary = true, "/nonexistent/octopus-agent" },
			want:   []string{"SecondaryNetwork /nonexistent has no octopus-ovn"},
		},
		"vpcs on the secondary network": {mutate: func(o *lab.Options) { o.SecondaryNetwork, o.Vpcs = true, true }},
		"vpcs without the secondary network": {
			mutate: func(o *lab.Options) { o.Vpcs = true },
			want:   []string{"Vpcs without SecondaryNetwork: VPCs are networks of the OVN secondary network; set SecondaryNetwork too"},
		},
		"ipv4":           {mutate: func(o *lab.Options) { o.IPFamily = lab.IPFamilyIPv4 }},
		"dual-stack":     {mutate: func(o *lab.Options) { o.IPFamily, o.ComponentProcesses = lab.IPFamilyDual, true }},
		"ipv6 only":      {mutate: func(o *lab.Options) { o.IPFamily = lab.IPFamilyIPv6 }, want: []string{`IPFamily "ipv6": IPv6-only clusters are not built yet; use dual`}},
		"mixed families": {mutate: func(o *lab.Options) { o.IPFamily, o.IPv4Clusters = lab.IPFamilyDual, []string{"cluster2"} }},
		"IPv4 cluster without dual": {
			mutate: func(o *lab.Options) { o.IPv4Clusters = []string{"cluster2"} },
			want:   []string{"IPv4Clusters cluster2: a mixed cluster set needs IPFamily dual"},
		},
		"IPv4 cluster not a member": {
			mutate: func(o *lab.Options) { o.IPFamily, o.IPv4Clusters = lab.IPFamilyDual, []string{"cluster3"} },
			want:   []string{"IPv4Clusters cluster3: not a member cluster; want one of cluster1, cluster2"},
		},
		"unknown family": {mutate: func(o *lab.Options) { o.IPFamily = "v6" }, want: []string{`IPFamily "v6": want ipv4, dual, ipv6`}},
		"dual-stack with what is IPv4 only": {
			mutate: func(o *lab.Options) {
				o.IPFamily, o.OverlappingCIDRs, o.SecondaryNetwork, o.Topology, o.CNI = lab.IPFamilyDual, true, true, v1alpha1.TopologyHub, cni.Flannel
			},
			want: []string{"IPFamily dual with OverlappingCIDRs: the lab joins overlapping clusters with IPv4 globalnet only; leave OverlappingCIDRs unset, or IPFamily ipv4",
				"IPFamily dual with SecondaryNetwork", "IPFamily dual with Topology", "IPFamily dual with CNI: the lab's flannel setup is IPv4 only"},
		},
		"no directory": {mutate: func(o *lab.Options) { o.Dir = "" }, want: []string{"Dir is empty"}},
		"everything wrong at once": {
			mutate: func(o *lab.Options) { o.Clusters, o.Topology = 16, "star" },
			want:   []string{"Clusters 16: want 1 to 15", `Topology "star"`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			o := valid
			tc.mutate(&o)
			err := o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate = nil, want %q", tc.want)
			}
			errs := err.(interface{ Unwrap() []error }).Unwrap()
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate = %v, want %d errors: %q", err, len(tc.want), tc.want)
			}
			for i, e := range errs {
				var oe *lab.OptionError
				if !errors.As(e, &oe) || !strings.HasPrefix(e.Error(), oe.Field+" ") {
					t.Errorf("error %v is not an OptionError that starts with its field", e)
				}
				if !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("error %d = %q, want it to contain %q", i, e, tc.want[i])
				}
				if strings.Contains(e.Error(), "--") {
					t.Errorf("error %q names a flag", e)
				}
			}
		})
	}
}

// TestOptionErrorFormat: a caller renames every field an error names, its own and the others.
func TestOptionErrorFormat(t *testing.T) {
	err := lab.Options{Clusters: 1, GatewaysPerCluster: 3, NodesPerCluster: 2, Dir: "/tmp/lab"}.Validate()
	var oe *lab.OptionError
	if !errors.As(err, &oe) {
		t.Fatalf("Validate = %v, want an OptionError", err)
	}
	got := oe.Format(func(field string) string { return "<" + field + ">" })
	if want := "<NodesPerCluster> 2 is fewer than <GatewaysPerCluster> 3: give at least 3 nodes"; got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
}

// TestWithDefaults: GatewaysPerCluster and the heartbeat get their default; the counts whose 0
// means "as many as needed" keep it, and given values stay.
func TestWithDefaults(t *testing.T) {
	d := lab.Options{}.WithDefaults()
	if d.GatewaysPerCluster != 1 || d.HeartbeatInterval == 0 || d.NodesPerCluster != 0 || d.HubGateways != 0 || d.IPFamily != lab.IPFamilyIPv4 {
		t.Errorf("WithDefaults = %+v", d)
	}
	if g := (lab.Options{GatewaysPerCluster: 3}).WithDefaults().GatewaysPerCluster; g != 3 {
		t.Errorf("a given GatewaysPerCluster became %d", g)
	}
}

// TestGatewayLabelIsTheChartsSelector: the lab labels its gateway nodes with what the member
// chart selects (labnet cannot import the API, so the value is written twice).
func TestGatewayLabelIsTheChartsSelector(t *testing.T) {
	if labnet.GatewayLabel != v1alpha1.GatewayNodeLabel {
		t.Errorf("labnet.GatewayLabel %q, v1alpha1.GatewayNodeLabel %q: the charts would select no lab node", labnet.GatewayLabel, v1alpha1.GatewayNodeLabel)
	}
}
