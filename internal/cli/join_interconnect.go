package cli

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/octopus-mcs/octopus/internal/secondarynet/icconfig"
)

// interconnectOvnIC is --interconnect's one value: OVN interconnection, Kube-OVN's model.
const interconnectOvnIC = "ovn-ic"

// interconnectFlags are join's OVN-IC flags. Each of the last five is the ovn-ic-config key of
// its name (docs/secondary-network.md has the table); --ovn-ic-config reads a Kube-OVN user's
// whole ConfigMap, and the key flags given as well override its keys.
type interconnectFlags struct {
	mode, file       string
	dbHosts, gwNodes []string
	nbPort, sbPort   int
	autoRoute        bool
	fs               *pflag.FlagSet
}

func (f *interconnectFlags) addFlags(fs *pflag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.mode, "interconnect", "", "with --addressing secondary: ovn-ic makes the cluster an OVN-IC availability zone named after its ID, joined to the hub's interconnection databases (hub deploy --interconnect)")
	fs.StringVar(&f.file, "ovn-ic-config", "", "with --interconnect ovn-ic: a Kube-OVN ovn-ic-config ConfigMap file (YAML or JSON) to take the keys from")
	fs.StringSliceVar(&f.dbHosts, icconfig.KeyDBHost, nil, "with --interconnect ovn-ic: the hub nodes' addresses of the IC databases (comma list)")
	fs.IntVar(&f.nbPort, icconfig.KeyNBPort, icconfig.DefaultNBPort, "with --interconnect ovn-ic: the IC NB database's port")
	fs.IntVar(&f.sbPort, icconfig.KeySBPort, icconfig.DefaultSBPort, "with --interconnect ovn-ic: the IC SB database's port")
	fs.StringSliceVar(&f.gwNodes, icconfig.KeyGatewayNodes, nil, "with --interconnect ovn-ic: the nodes that carry the transit port, highest priority first (comma list)")
	fs.BoolVar(&f.autoRoute, icconfig.KeyAutoRoute, true, "with --interconnect ovn-ic: advertise this cluster's block and learn the others' (false: only static routes)")
}

// config is the ovn-ic-config the flags ask for, nil without --interconnect.
func (f *interconnectFlags) config() (*icconfig.Config, error) {
	changed := func(name string) bool { return f.fs != nil && f.fs.Changed(name) }
	if f.mode == "" {
		for _, name := range []string{"ovn-ic-config", icconfig.KeyDBHost, icconfig.KeyNBPort, icconfig.KeySBPort, icconfig.KeyGatewayNodes, icconfig.KeyAutoRoute} {
			if changed(name) {
				return nil, fmt.Errorf("--%s configures OVN interconnection: add --interconnect %s", name, interconnectOvnIC)
			}
		}
		return nil, nil
	}
	if f.mode != interconnectOvnIC {
		return nil, fmt.Errorf("--interconnect %q: the one interconnection is %s", f.mode, interconnectOvnIC)
	}
	c := icconfig.Config{NBPort: f.nbPort, SBPort: f.sbPort, AutoRoute: f.autoRoute, DBHosts: f.dbHosts, GatewayNodes: f.gwNodes}
	if f.file != "" {
		data, err := os.ReadFile(f.file)
		if err != nil {
			return nil, fmt.Errorf("--ovn-ic-config: %w", err)
		}
		if c, err = icconfig.ParseConfigMap(data); err != nil {
			return nil, fmt.Errorf("--ovn-ic-config %s: %w", f.file, err)
		}
		if changed(icconfig.KeyDBHost) {
			c.DBHosts = f.dbHosts
		}
		if changed(icconfig.KeyNBPort) {
			c.NBPort = f.nbPort
		}
		if changed(icconfig.KeySBPort) {
			c.SBPort = f.sbPort
		}
		if changed(icconfig.KeyGatewayNodes) {
			c.GatewayNodes = f.gwNodes
		}
		if changed(icconfig.KeyAutoRoute) {
			c.AutoRoute = f.autoRoute
		}
	}
	// Through the same parser as the ConfigMap the icmaster will read: flags and file are
	// checked by one set of rules.
	c.Enabled = true
	parsed, err := icconfig.Parse(c.Data())
	if err != nil {
		return nil, fmt.Errorf("--interconnect %s: %w", interconnectOvnIC, err)
	}
	return &parsed, nil
}
