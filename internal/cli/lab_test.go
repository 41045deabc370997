package cli

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/lab"
)

func TestLabUpFlags(t *testing.T) {
	cases := map[string]struct {
		args    []string
		wantErr string
		// nodes, gateways and backend of the lab.Options when there is no error.
		nodes, gateways int
		backend         string
		overlapping     bool
		direct          []string
		topology        v1alpha1.Topology
		hubGateways     int
		cni             string
		ipFamily        string
		secondary, vpcs bool
	}{
		"defaults":                  {args: nil, nodes: 0, gateways: 1, backend: "wireguard", topology: "mesh"},
		"flannel":                   {args: []string{"--cni", "flannel"}, gateways: 1, backend: "wireguard", topology: "mesh", cni: "flannel"},
		"unknown CNI":               {args: []string{"--cni", "calico"}, wantErr: `--cni "calico": want bridge or flannel`},
		"vxlan":                     {args: []string{"--backend", "vxlan"}, gateways: 1, backend: "vxlan", topology: "mesh"},
		"two gateways, default":     {args: []string{"--gateways-per-cluster", "2"}, nodes: 0, gateways: 2, backend: "wireguard", topology: "mesh"},
		"two gateways, four nodes":  {args: []string{"--gateways-per-cluster", "2", "--nodes-per-cluster", "4"}, nodes: 4, gateways: 2, backend: "wireguard", topology: "mesh"},
		"mesh":                      {args: []string{"--topology", "mesh"}, gateways: 1, backend: "wireguard", topology: "mesh"},
		"overlapping CIDRs":         {args: []string{"--overlapping-cidrs"}, gateways: 1, backend: "wireguard", overlapping: true, topology: "mesh"},
		"mixed":                     {args: []string{"--overlapping-cidrs", "--direct-clusters", "cluster2"}, gateways: 1, backend: "wireguard", overlapping: true, direct: []string{"cluster2"}, topology: "mesh"},
		"direct without overlap":    {args: []string{"--direct-clusters", "cluster2"}, wantErr: "--direct-clusters cluster2: a mixed cluster set needs --overlapping-cidrs or --secondary-network"},
		"hub topology":              {args: []string{"--topology", "hub", "--backend", "vxlan"}, gateways: 1, backend: "vxlan", topology: "hub"},
		"two hub gateways":          {args: []string{"--topology", "hub", "--hub-gateways", "2"}, gateways: 1, backend: "wireguard", topology: "hub", hubGateways: 2},
		"hub gateways in a mesh":    {args: []string{"--hub-gateways", "2"}, wantErr: "--hub-gateways 2: want 1 to 3, with --topology hub"},
		"too many hub gateways":     {args: []string{"--topology", "hub", "--hub-gateways", "4"}, wantErr: "--hub-gateways 4: want 1 to 3"},
		"unknown topology":          {args: []string{"--topology", "star"}, wantErr: `--topology "star": want mesh or hub`},
		"unknown backend":           {args: []string{"--backend", "ipsec"}, wantErr: `--backend "ipsec": want wireguard or vxlan`},
		"fewer nodes than gateways": {args: []string{"--gateways-per-cluster", "3", "--nodes-per-cluster", "2"}, wantErr: "--nodes-per-cluster 2 is fewer than --gateways-per-cluster 3: give at least 3 nodes"},
		"zero gateways":             {args: []string{"--gateways-per-cluster", "0"}, wantErr: "--gateways-per-cluster 0: want 1 to 13"},
		"too many clusters":         {args: []string{"--clusters", "16"}, wantErr: "--clusters 16: want 1 to 15"},
		"dual-stack":                {args: []string{"--ip-family", "dual"}, gateways: 1, backend: "wireguard", topology: "mesh", ipFamily: "dual"},
		"unknown family":            {args: []string{"--ip-family", "ipv5"}, wantErr: `--ip-family "ipv5": want ipv4, dual, ipv6`},
		"ipv6 only":                 {args: []string{"--ip-family", "ipv6"}, wantErr: `--ip-family "ipv6": IPv6-only clusters are not built yet; use dual`},
		"dual with flannel":         {args: []string{"--ip-family", "dual", "--cni", "flannel"}, wantErr: "--ip-family dual with --cni: the lab's flannel setup is IPv4 only; leave --cni unset, or --ip-family ipv4"},
		"dual with globalnet":       {args: []string{"--ip-family", "dual", "--overlapping-cidrs"}, wantErr: "--ip-family dual with --overlapping-cidrs"},
		"secondary network":         {args: []string{"--secondary-network"}, gateways: 1, backend: "wireguard", topology: "mesh", secondary: true},
		"vpcs":                      {args: []string{"--secondary-network", "--vpcs"}, gateways: 1, backend: "wireguard", topology: "mesh", secondary: true, vpcs: true},
		"vpcs without secondary":    {args: []string{"--vpcs"}, wantErr: "--vpcs without --secondary-network: VPCs are networks of the OVN secondary network; set --secondary-network too"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := "/tmp/lab"
			o := &labUpOptions{dir: &dir}
			fs := pflag.NewFlagSet("up", pflag.ContinueOnError)
			o.bindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			o.nodesSet = fs.Changed("nodes-per-cluster")
			opts, err := o.labOptions()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if opts.NodesPerCluster != tc.nodes || opts.GatewaysPerCluster != tc.gateways || opts.Clusters != 2 || opts.Dir != dir ||
				opts.OverlappingCIDRs != tc.overlapping || !slices.Equal(opts.DirectClusters, tc.direct) || opts.Topology != tc.topology || opts.HubGateways != tc.hubGateways {
				t.Errorf("options %+v, want %d nodes and %d gateways in 2 clusters", opts, tc.nodes, tc.gateways)
			}
			if want := cmp.Or(tc.ipFamily, "ipv4"); opts.IPFamily != want {
				t.Errorf("IPFamily %q, want %q", opts.IPFamily, want)
			}
			if opts.SecondaryNetwork != tc.secondary || opts.Vpcs != tc.vpcs {
				t.Errorf("SecondaryNetwork %v, Vpcs %v; want %v, %v", opts.SecondaryNetwork, opts.Vpcs, tc.secondary, tc.vpcs)
			}
			if want := cmp.Or(tc.cni, "bridge"); opts.CNI != want {
				t.Errorf("CNI %q, want %q", opts.CNI, want)
			}
			for _, name := range []string{lab.HubName, lab.ClusterName(1), lab.ClusterName(2)} {
				if got := opts.Backends[name]; got != tc.backend {
					t.Errorf("backend of %s = %q, want %q", name, got, tc.backend)
				}
			}
		})
	}
}
