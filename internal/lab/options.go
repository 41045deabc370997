package lab

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/lab/cni"
	"github.com/octopus-mcs/octopus/internal/lab/images"
	"github.com/octopus-mcs/octopus/internal/lab/labnet"
)

// OptionError is an Options field with a value Up cannot use. Its message names fields as
// Options does; Format names them as a caller's users know them (the CLI: its flags).
type OptionError struct {
	// Field is the Options field at fault.
	Field string
	// message says what is wrong and what would do, naming every field as {Field}.
	message string
}

// optionError makes an OptionError for field; format may name other fields as {Field}.
func optionError(field, format string, args ...any) *OptionError {
	return &OptionError{Field: field, message: "{" + field + "} " + fmt.Sprintf(format, args...)}
}

var fieldRef = regexp.MustCompile(`\{([A-Za-z][A-Za-z0-9]*)\}`)

// Format renders the error naming each field as name returns it.
func (e *OptionError) Format(name func(field string) string) string {
	return fieldRef.ReplaceAllStringFunc(e.message, func(ref string) string { return name(ref[1 : len(ref)-1]) })
}

func (e *OptionError) Error() string { return e.Format(func(f string) string { return f }) }

// WithDefaults returns o with the defaults of its optional fields that have one value filled
// in; NodesPerCluster and HubGateways keep 0, which means "as many as needed" (see Options).
func (o Options) WithDefaults() Options {
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = 2 * time.Second
	}
	if o.GatewaysPerCluster == 0 {
		o.GatewaysPerCluster = 1
	}
	if o.CNI == "" {
		o.CNI = cni.Bridge
	}
	if o.IPFamily == "" {
		o.IPFamily = IPFamilyIPv4
	}
	return o
}

// The lab's address families (Options.IPFamily).
const (
	// IPFamilyIPv4 gives every cluster IPv4 pod and service CIDRs and nodes: the default.
	IPFamilyIPv4 = "ipv4"
	// IPFamilyDual makes the member clusters dual-stack: IPv4 and IPv6 (labnet.IPv6Range)
	// pod and service CIDRs, nodes with an InternalIP of each family, pods with an address of
	// each. The underlay and the hub stay IPv4; the tunnels carry both families.
	IPFamilyDual = "dual"
	// IPFamilyIPv6 would make IPv6-only clusters; not built yet.
	IPFamilyIPv6 = "ipv6"
)

// IPFamilies are the values of Options.IPFamily, the default first.
var IPFamilies = []string{IPFamilyIPv4, IPFamilyDual, IPFamilyIPv6}

// dualStack reports whether the member clusters are dual-stack.
func (o Options) dualStack() bool { return o.IPFamily == IPFamilyDual }

// Validate reports, as *OptionError values joined, everything in o that Up would refuse. It
// checks o as given: Up validates o.WithDefaults(), and a caller that passes values its users
// typed (the CLI) validates those, so that a GatewaysPerCluster of 0 that they asked for is
// refused rather than taken for the default.
func (o Options) Validate() error {
	var errs []error
	if o.Clusters < 1 || o.Clusters > MaxClusters {
		errs = append(errs, optionError("Clusters", "%d: want 1 to %d", o.Clusters, MaxClusters))
	}
	if o.GatewaysPerCluster < 1 || o.GatewaysPerCluster > labnet.MaxNodesPerCluster {
		errs = append(errs, optionError("GatewaysPerCluster", "%d: want 1 to %d", o.GatewaysPerCluster, labnet.MaxNodesPerCluster))
	}
	switch n := o.NodesPerCluster; {
	case n == 0:
	case n > labnet.MaxNodesPerCluster:
		errs = append(errs, optionError("NodesPerCluster", "%d: want at most %d", n, labnet.MaxNodesPerCluster))
	case n < labnet.MinNodesPerCluster:
		errs = append(errs, optionError("NodesPerCluster", "%d: want at least %d (the active gateway's node and another)", n, labnet.MinNodesPerCluster))
	case n < o.GatewaysPerCluster:
		errs = append(errs, optionError("NodesPerCluster", "%d is fewer than {GatewaysPerCluster} %d: give at least %d nodes",
			n, o.GatewaysPerCluster, o.GatewaysPerCluster))
	}
	switch o.Topology {
	case "", v1alpha1.TopologyMesh, v1alpha1.TopologyHub:
	default:
		errs = append(errs, optionError("Topology", "%q: want %s or %s", o.Topology, v1alpha1.TopologyMesh, v1alpha1.TopologyHub))
	}
	if h := o.HubGateways; h != 0 && (o.Topology != v1alpha1.TopologyHub || h < 1 || h > labnet.MaxHubGateways) {
		errs = append(errs, optionError("HubGateways", "%d: want 1 to %d, with {Topology} %s (only the hub topology has hub gateways)",
			h, labnet.MaxHubGateways, v1alpha1.TopologyHub))
	}
	// One error per unknown backend, naming the clusters that were given it.
	bad := map[string][]string{}
	for cluster, backend := range o.Backends {
		switch v1alpha1.Backend(backend) {
		case "", v1alpha1.BackendWireGuard, v1alpha1.BackendVXLAN:
		default:
			bad[backend] = append(bad[backend], cluster)
		}
	}
	for _, backend := range slices.Sorted(maps.Keys(bad)) {
		slices.Sort(bad[backend])
		errs = append(errs, optionError("Backends", "%q: want %s or %s (given for %s)",
			backend, v1alpha1.BackendWireGuard, v1alpha1.BackendVXLAN, strings.Join(bad[backend], ", ")))
	}
	for _, name := range o.DirectClusters {
		switch {
		case !o.OverlappingCIDRs && !o.SecondaryNetwork:
			errs = append(errs, optionError("DirectClusters", "%s: a mixed cluster set needs {OverlappingCIDRs} or {SecondaryNetwork}; without either every cluster is direct", name))
		case name == ClusterName(1):
			errs = append(errs, optionError("DirectClusters", "%s: its CIDRs are the ones the globalnet clusters share; name another cluster", name))
		case !slices.Contains(memberNames(o.Clusters), name):
			errs = append(errs, optionError("DirectClusters", "%s: not a member cluster; want one of %s", name, strings.Join(memberNames(o.Clusters), ", ")))
		}
	}
	for _, name := range o.IPv4Clusters {
		switch {
		case !o.dualStack():
			errs = append(errs, optionError("IPv4Clusters", "%s: a mixed cluster set needs {IPFamily} %s; without it every cluster is IPv4-only", name, IPFamilyDual))
		case !slices.Contains(memberNames(o.Clusters), name):
			errs = append(errs, optionError("IPv4Clusters", "%s: not a member cluster; want one of %s", name, strings.Join(memberNames(o.Clusters), ", ")))
		}
	}
	if o.Unjoined {
		// These configure what the lab deploys when it joins the clusters itself.
		if o.Topology == v1alpha1.TopologyHub {
			errs = append(errs, optionError("Unjoined", "with {Topology} %s: the hub's gateways need the hub the lab deploys; leave {Topology} unset (a joining cluster picks its own)", v1alpha1.TopologyHub))
		}
		if len(o.Backends) > 0 {
			errs = append(errs, optionError("Unjoined", "with {Backends}: the lab runs no gateway to give a backend; leave {Backends} unset"))
		}
		if o.ComponentProcesses {
			errs = append(errs, optionError("Unjoined", "with {ComponentProcesses}: the lab runs no component; leave {ComponentProcesses} unset"))
		}
	}
	if o.SecondaryNetwork {
		// The secondary network exists only as the member chart's pods.
		switch {
		case o.Unjoined:
			errs = append(errs, optionError("SecondaryNetwork", "with {Unjoined}: the lab joins no cluster to give a secondary CIDR; leave {SecondaryNetwork} unset"))
		case o.ComponentProcesses:
			errs = append(errs, optionError("SecondaryNetwork", "with {ComponentProcesses}: OVN and its components run only as the member chart's pods; leave {ComponentProcesses} unset"))
		case o.AgentBinary != "" && !images.HasOVNBinaries(filepath.Dir(o.AgentBinary)):
			errs = append(errs, optionError("SecondaryNetwork", "%s has no octopus-ovn for the OVN image: go build -o DIR/ ./cmd/...", filepath.Dir(o.AgentBinary)))
		}
	}
	if o.Vpcs && !o.SecondaryNetwork {
		errs = append(errs, optionError("Vpcs", "without {SecondaryNetwork}: VPCs are networks of the OVN secondary network; set {SecondaryNetwork} too"))
	}
	if o.Dir == "" {
		errs = append(errs, optionError("Dir", "is empty: the lab needs a directory for what it writes"))
	}
	if _, err := cni.Validate(o.CNI); err != nil {
		errs = append(errs, optionError("CNI", "%q: want %s", o.CNI, strings.Join(cni.Names, " or ")))
	}
	errs = append(errs, o.validateIPFamily()...)
	return errors.Join(errs...)
}

// validateIPFamily checks IPFamily and what a dual-stack lab cannot be combined with yet: the
// modes whose lab wiring is IPv4 only (flannel's configuration, globalnet's and the secondary
// network's lab setup, the hub gateways' namespaces).
func (o Options) validateIPFamily() []error {
	switch o.IPFamily {
	case "", IPFamilyIPv4:
		return nil
	case IPFamilyIPv6:
		return []error{optionError("IPFamily", "%q: IPv6-only clusters are not built yet; use %s (both families)", o.IPFamily, IPFamilyDual)}
	case IPFamilyDual:
	default:
		return []error{optionError("IPFamily", "%q: want %s", o.IPFamily, strings.Join(IPFamilies, ", "))}
	}
	var errs []error
	not := func(field string, set bool, why string) {
		if set {
			errs = append(errs, optionError("IPFamily", "%s with {%s}: %s; leave {%s} unset, or {IPFamily} %s", IPFamilyDual, field, why, field, IPFamilyIPv4))
		}
	}
	not("OverlappingCIDRs", o.OverlappingCIDRs, "the lab joins overlapping clusters with IPv4 globalnet only")
	not("SecondaryNetwork", o.SecondaryNetwork, "the secondary network is IPv4 only")
	not("Topology", o.Topology == v1alpha1.TopologyHub, "the hub's gateway nodes are IPv4 only")
	not("CNI", o.CNI == cni.Flannel, "the lab's flannel setup is IPv4 only")
	return errs
}

// memberNames are the names of a lab's n member clusters.
func memberNames(n int) []string {
	names := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		names = append(names, ClusterName(i))
	}
	return names
}
